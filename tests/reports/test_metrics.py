"""deadletter.reports.metrics: the Prometheus endpoint, off without a token, exact figures."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import include, path, reverse
from prometheus_client.parser import text_string_to_metric_families

from deadletter import queue
from deadletter.queue import settlements
from tests.factories import insert_at, manage_py, park_aged

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls(__name__)]

urlpatterns = [path("ops/", include("deadletter.urls"))]

TOKEN = "s3cret-token"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def scrape(client, token: str | None = TOKEN):
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return client.get(reverse("deadletter:metrics"), headers=headers)


def test_the_endpoint_is_off_without_a_token_setting(client, settings) -> None:
    settings.DEADLETTER_METRICS_TOKEN = None
    assert scrape(client).status_code == 404


@pytest.mark.parametrize("header", [None, "Bearer wrong", f"Basic {TOKEN}", "Bearer ", TOKEN])
def test_a_missing_or_wrong_token_is_refused(client, settings, header: str | None) -> None:
    settings.DEADLETTER_METRICS_TOKEN = TOKEN
    headers = {"Authorization": header} if header is not None else {}
    response = client.get(reverse("deadletter:metrics"), headers=headers)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert b"deadletter_queue_depth" not in response.content


def test_the_scrape_parses_and_holds_the_figures(client, settings) -> None:
    settings.DEADLETTER_METRICS_TOKEN = TOKEN
    settings.DEADLETTER_MAX_QUEUE_AGE = timedelta(days=30)
    settings.DEADLETTER_EXPIRY_WARNING = None
    park_aged("mail", days_ago=29.5, attempts=2, seq=1)
    park_aged("mail", days_ago=2, seq=2)
    park_aged("mail", days_ago=1, attempts=12, seq=3)
    corrupt = park_aged("hooks", days_ago=1)
    settlements.drop_msg(corrupt, None, "permanent")
    response = scrape(client)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    got = samples(response.content.decode())
    mail, hooks = (("queue", "mail"),), (("queue", "hooks"),)
    assert got[("deadletter_queue_depth", mail)] == 3
    assert got[("deadletter_queue_depth", hooks)] == 0
    assert got[("deadletter_oldest_message_age_seconds", mail)] == pytest.approx(
        29.5 * 86400, abs=60
    )
    assert got[("deadletter_oldest_failure_age_seconds", mail)] == pytest.approx(
        29.5 * 86400, abs=60
    )
    assert got[("deadletter_expiring_messages", mail)] == 1
    assert got[("deadletter_expiry_horizon_seconds", ())] == 86400
    assert got[("deadletter_dropped_total", (("queue", "hooks"), ("reason", "permanent")))] == 1
    assert got[("deadletter_dropped_total", (("queue", "mail"), ("reason", "expired")))] == 0
    bucket = "deadletter_message_attempts_bucket"
    assert got[(bucket, (("le", "0.0"), ("queue", "mail")))] == 1
    assert got[(bucket, (("le", "2.0"), ("queue", "mail")))] == 2
    assert got[(bucket, (("le", "10.0"), ("queue", "mail")))] == 2
    assert got[(bucket, (("le", "+Inf"), ("queue", "mail")))] == 3
    assert got[("deadletter_message_attempts_gcount", mail)] == 3


def test_expired_drops_show_in_the_scrape(client, settings) -> None:
    settings.DEADLETTER_METRICS_TOKEN = TOKEN
    settings.DEADLETTER_MAX_QUEUE_AGE = timedelta(days=30)
    park_aged("mail", days_ago=31, seq=1)
    park_aged("mail", days_ago=40, seq=2)
    park_aged("mail", days_ago=1, seq=3)
    assert len(queue.fetch_failed_msgs("mail")) == 1
    got = samples(scrape(client).content.decode())
    dropped = ("deadletter_dropped_total", (("queue", "mail"), ("reason", "expired")))
    assert got[dropped] == 2
    assert got[("deadletter_queue_depth", (("queue", "mail"),))] == 1


def test_counters_survive_a_restart(settings, subprocess_env) -> None:
    # Dropped in one process, read by another that starts afterwards.
    settings.DEADLETTER_MAX_QUEUE_AGE = timedelta(days=30)
    park_aged("mail", days_ago=45, seq=1)
    insert_at("mail", 5, 2, b"\xff garbage")
    assert queue.fetch_failed_msgs("mail") == []
    out = manage_py(
        "deadletter_stats", "--format", "prometheus", env=subprocess_env, timeout=120, check=True
    ).stdout
    got = samples(out)
    labels = lambda reason: (("queue", "mail"), ("reason", reason))  # noqa: E731
    assert got[("deadletter_dropped_total", labels("expired"))] == 1
    assert got[("deadletter_dropped_total", labels("corrupt"))] == 1
    assert got[("deadletter_queue_depth", (("queue", "mail"),))] == 0


def test_the_scrape_counts_waiting_messages_and_paused_queues(client, settings) -> None:
    from deadletter.drain import Drainer
    from tests.factories import park

    settings.DEADLETTER_METRICS_TOKEN = TOKEN
    settings.DEADLETTER_HANDLERS = {
        "hooks": {
            "handler": "tests.factories.failing_handler",
            "backoff": [600, 600],
            "breaker": 2,
        },
    }
    park("a", "b", "c", queue="hooks")
    park("m", queue="mail")  # no handler: no pass goes over it
    Drainer().run()  # two failures pause hooks; both wait ten minutes
    got = samples(scrape(client).content.decode())
    hooks, mail = (("queue", "hooks"),), (("queue", "mail"),)
    assert got[("deadletter_waiting_messages", hooks)] == 2
    assert got[("deadletter_queue_paused", hooks)] == 1
    assert got[("deadletter_queue_paused", mail)] == 0


def test_a_scrape_labels_a_capped_number_of_queues_and_sums_the_rest_exactly(
    client, settings
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from deadletter.reports.metrics import METRICS_QUEUES
    from tests.reports.many_queues import park_one_row_queues

    settings.DEADLETTER_METRICS_TOKEN = TOKEN
    settings.DEADLETTER_EXPIRY_WARNING = None

    def scraped() -> tuple[int, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
        with CaptureQueriesContext(connection) as ctx:
            response = scrape(client)
        assert response.status_code == 200
        return len(ctx.captured_queries), samples(response.content.decode())

    park_one_row_queues(METRICS_QUEUES + 20)
    few_queries, few = scraped()
    park_one_row_queues(3000, prefix="spam-x")
    many_queries, many = scraped()
    assert many_queries == few_queries
    assert len(many) == len(few)
    depths = {labels: v for (name, labels), v in many.items() if name == "deadletter_queue_depth"}
    assert len(depths) == METRICS_QUEUES + 1
    assert depths[(("queue", ""),)] == 3020
    assert sum(depths.values()) == METRICS_QUEUES + 3020
