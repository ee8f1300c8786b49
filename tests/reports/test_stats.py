"""deadletter.reports.stats: one function's figures per queue, and their totals."""

from __future__ import annotations

from datetime import timedelta

import pytest

from deadletter import queue
from deadletter.models import DropCount
from deadletter.queue import settlements
from deadletter.reports import stats, summaries
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message
from tests.factories import DAY, insert_at

pytestmark = pytest.mark.django_db(transaction=True)

NOW = 1_800_000_000 * 10**9  # 2027-01-15


def failed(days_ago: float, attempts: int = 0) -> Message:
    extra = {"Attempts": attempts} if attempts else {}
    return Message(subject="s", queued_at=GoTime(NOW - int(days_ago * DAY)), extra=extra)


def test_depth_and_oldest_ages_come_from_the_head() -> None:
    insert_at("mail", NOW - 2 * DAY, 1, failed(days_ago=5))
    insert_at("mail", NOW - DAY, 2, failed(days_ago=1))
    [mail] = stats.collect(now_ns=NOW).queues
    assert mail.name == "mail"
    assert mail.depth == 2
    assert mail.oldest_enqueued_age == 2 * 86_400
    assert mail.oldest_failure_age == 5 * 86_400
    assert mail.oldest_queued_at == GoTime(NOW - 5 * DAY)


def test_the_figures_agree_with_the_api_summaries() -> None:
    for i in range(7):
        insert_at("a", NOW - DAY + i, i, failed(days_ago=3))
    insert_at("b", NOW - 5, 1, failed(days_ago=0.5))
    figures = {q.name: q for q in stats.collect(now_ns=NOW).queues}
    for status in summaries.queue_statuses():
        assert figures[status.name].depth == status.depth
        assert figures[status.name].oldest_failure_age == status.oldest_age_seconds(NOW)


@pytest.mark.parametrize(
    ("ages_in_days", "expiring"),
    [
        ([1, 2, 3], 0),
        ([29.5, 10, 1], 1),
        ([31, 29.5, 28.5, 2], 2),  # one past the limit (not yet fetched) counts too
    ],
)
def test_expiring_counts_messages_the_age_limit_drops_within_the_horizon(
    settings, ages_in_days: list[float], expiring: int
) -> None:
    settings.DEADLETTER_MAX_QUEUE_AGE = timedelta(days=30)
    for i, age in enumerate(ages_in_days):
        insert_at("q", NOW - int(age * DAY), i, failed(days_ago=age))
    [q] = stats.collect(horizon=timedelta(days=1), now_ns=NOW).queues
    assert q.expiring == expiring
    assert q.expiring_complete


def test_expiring_stops_at_rows_parked_after_the_horizon(settings) -> None:
    # A remainder parked again yesterday keeps its first-failure time: the stated rule
    # counts it once its key is that old, and reads nothing past the horizon.
    settings.DEADLETTER_MAX_QUEUE_AGE = timedelta(days=30)
    insert_at("q", NOW - 29 * DAY - DAY // 2, 1, failed(days_ago=29.5))
    insert_at("q", NOW - DAY, 2, failed(days_ago=29.5))
    [q] = stats.collect(horizon=timedelta(days=1), now_ns=NOW).queues
    assert q.expiring == 1


def test_expiring_scan_is_bounded_and_says_so(monkeypatch, settings) -> None:
    settings.DEADLETTER_MAX_QUEUE_AGE = timedelta(days=30)
    monkeypatch.setattr(stats, "EXPIRING_SCAN_LIMIT", 3)
    for i in range(5):
        insert_at("q", NOW - 40 * DAY + i, i, failed(days_ago=40))
    [q] = stats.collect(now_ns=NOW).queues
    assert (q.expiring, q.expiring_complete) == (3, False)


def test_attempts_histogram_buckets_each_message() -> None:
    for i, attempts in enumerate([0, 0, 1, 2, 3, 4, 5, 7, 10, 11, 50]):
        insert_at("q", NOW - 100 + i, i, failed(days_ago=1, attempts=attempts))
    [q] = stats.collect(now_ns=NOW).queues
    assert q.attempts == {"0": 2, "1": 1, "2": 1, "3": 1, "4-5": 2, "6-10": 2, "11+": 2}
    assert q.attempts_rows == 11


def test_attempts_sample_reads_only_the_oldest_rows() -> None:
    insert_at("q", NOW - 100, 1, failed(days_ago=1, attempts=9))
    for i in range(2, 6):
        insert_at("q", NOW - 100 + i, i, failed(days_ago=1))
    [q] = stats.collect(attempts_sample=2, now_ns=NOW).queues
    assert q.attempts_rows == 2
    assert (q.attempts["6-10"], q.attempts["0"]) == (1, 1)
    [full] = stats.collect(attempts_sample=None, now_ns=NOW).queues
    assert (full.attempts_rows, full.attempts["0"]) == (5, 4)


def test_drops_are_counted_by_reason_and_kept_for_empty_queues() -> None:
    key = insert_at("gone", NOW, 1, failed(days_ago=1))
    assert settlements.drop_msg(key, None, "permanent")
    DropCount.objects.create(queue="gone", reason="expired", count=4)
    [gone] = stats.collect(now_ns=NOW).queues
    assert gone.depth == 0
    assert gone.dropped == {"expired": 4, "corrupt": 0, "permanent": 1, "max_attempts": 0}


def test_totals_add_up_the_queues(settings) -> None:
    settings.DEADLETTER_MAX_QUEUE_AGE = timedelta(days=30)
    insert_at("a", NOW - 3 * DAY, 1, failed(days_ago=3, attempts=1))
    insert_at("a", NOW - 3 * DAY + 1, 2, failed(days_ago=2))
    insert_at("c", NOW - 29 * DAY - DAY // 2, 1, failed(days_ago=29.9))
    insert_at("b", NOW - DAY, 1, failed(days_ago=2))
    insert_at("b", NOW - 5, 2, b"\xff")
    DropCount.objects.create(queue="b", reason="corrupt", count=2)
    figures = stats.collect(now_ns=NOW)
    totals = figures.totals
    assert totals.depth == 5
    assert totals.expiring == 1
    assert totals.oldest_enqueued_age == 29.5 * 86_400
    assert totals.oldest_failure_age == pytest.approx(29.9 * 86_400)
    assert totals.attempts["1"] == 1 and totals.attempts["0"] == 3
    assert totals.dropped["corrupt"] == 2


def test_chosen_queues_only_and_an_absent_one_is_empty() -> None:
    insert_at("a", NOW, 1, failed(days_ago=1))
    insert_at("b", NOW, 1, failed(days_ago=1))
    figures = stats.collect(["b", "nothing"], now_ns=NOW)
    assert [(q.name, q.depth) for q in figures.queues] == [("b", 1), ("nothing", 0)]
    assert figures.queues[1].oldest_enqueued_age is None
    with pytest.raises(ValueError, match="empty"):
        stats.collect([""])


def test_the_horizon_defaults_to_the_warning_setting(settings) -> None:
    settings.DEADLETTER_EXPIRY_WARNING = timedelta(days=3)
    assert stats.collect().horizon == timedelta(days=3)
    settings.DEADLETTER_EXPIRY_WARNING = None
    assert stats.collect().horizon == summaries.DEFAULT_HORIZON


def test_as_dict_is_plain_json_with_go_times() -> None:
    import json

    msg = Message(queued_at=GoTime.parse("2026-12-01T10:00:00.123456789+01:00"))
    insert_at("q", NOW - 10**9, 1, msg)
    data = json.loads(json.dumps(stats.collect(now_ns=NOW).as_dict()))
    [q] = data["queues"]
    assert q["oldest_queued_at"] == "2026-12-01T10:00:00.123456789+01:00"
    assert q["oldest_enqueued_age_seconds"] == 1.0
    assert data["totals"]["depth"] == 1


@pytest.mark.django_db(transaction=True)
def test_stats_say_how_many_wait_and_whether_the_last_pass_paused_the_queue(settings) -> None:
    import json
    from io import StringIO

    from django.core.management import call_command

    from deadletter.drain import Drainer
    from tests.factories import park

    settings.DEADLETTER_HANDLERS = {
        "hooks": {"handler": "tests.factories.failing_handler", "backoff": [600, 600], "breaker": 1}
    }
    park("a", "b", queue="hooks")
    Drainer().run()
    out = StringIO()
    call_command("deadletter_stats", "--format", "json", stdout=out)
    (hooks,) = json.loads(out.getvalue())["queues"]
    assert (hooks["waiting"], hooks["paused"]) == (1, True)
    text = StringIO()
    call_command("deadletter_stats", stdout=text)
    assert "waiting  paused" in text.getvalue()


def test_a_limit_lists_the_handlers_queues_and_the_first_others_and_sums_the_rest(
    settings,
) -> None:
    from django.db import connection

    from deadletter.store.counters import record_drop
    from tests.reports.many_queues import park_one_row_queues

    settings.DEADLETTER_HANDLERS = {"zz-served": "tests.factories.ok_handler"}
    names = park_one_row_queues(30)
    queue.store_failed_msgs("zz-served", Message(subject="x"))
    record_drop(connection, "zzz-gone", "expired", 3)  # holds no row, past the limit
    figures = stats.collect(limit=5, now_ns=NOW)
    assert [q.name for q in figures.queues] == [*names[:5], "zz-served"]
    assert figures.others is not None
    assert (figures.others.depth, figures.others.dropped["expired"]) == (25, 3)
    assert (figures.totals.depth, figures.totals.dropped["expired"]) == (31, 3)
    assert not figures.totals.expiring_complete


def test_a_limited_collect_asks_the_same_statements_at_3000_queues() -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.reports.many_queues import park_one_row_queues

    def asked() -> tuple[int, int]:
        with CaptureQueriesContext(connection) as ctx:
            figures = stats.collect(limit=10, now_ns=NOW)
        return len(ctx.captured_queries), len(figures.queues)

    park_one_row_queues(20)
    few = asked()
    park_one_row_queues(3000, prefix="spam-x")
    assert asked() == few
    assert few[1] == 10
