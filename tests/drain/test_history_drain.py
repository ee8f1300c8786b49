"""Each failed attempt of a real drain in the message's history: three failures
give three attempts (outcome, duration, error, actor) on the message page and in the
API's JSON; a delivery of a message that had failed removes them, a first delivery
sends no statement more; Retry now records its user."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from deadletter import NeedsOperator
from deadletter.drain import Drainer, DrainOptions, redeliver
from deadletter.models import Attempt
from deadletter.queue import history, store_failed_msgs
from deadletter.wire import keys
from deadletter.wire.messages import Message
from tests.admin.test_admin import CHANGELIST, message_link, open_page
from tests.factories import parked

pytestmark = pytest.mark.django_db(transaction=True)

HANDLER = "tests.drain.test_history_drain.three_ways"
API = "/api/deadletter"
calls: list[str] = []


def three_ways(msg: Message) -> None:
    """Fails, then hangs past the time limit, then asks for an operator; then delivers."""
    calls.append(msg.subject)
    if len(calls) == 1:
        raise ConnectionError("refused by 10.0.0.7:8443")
    if len(calls) == 2:
        time.sleep(0.5)
        return
    if len(calls) == 3:
        raise NeedsOperator("the address book has no such user")


@pytest.fixture
def three_failures(settings: Any) -> bytes:
    """A message after three passes of a drain: failed, timed out, held."""
    calls.clear()
    settings.DEADLETTER_HANDLERS = {"q": HANDLER}
    settings.DEADLETTER_HANDLER_TIMEOUT = 0.2
    key = store_failed_msgs("q", Message(subject="hello"))
    for _ in range(3):
        Drainer(["q"], DrainOptions(ignore_backoff=True)).run()
    return key


def test_three_failures_are_three_attempts_oldest_first(three_failures: bytes) -> None:
    attempts = history.attempts_of(three_failures)
    assert [a.outcome for a in attempts] == ["failed", "timeout", "held"]
    assert [a.error for a in attempts] == [
        "ConnectionError: refused by 10.0.0.7:8443",
        "HandlerTimeout: handler did not return within 0.2 s",
        "NeedsOperator: the address book has no such user",
    ]
    assert [a.actor for a in attempts] == ["drain"] * 3
    assert attempts[1].duration is not None and attempts[1].duration >= 0.2
    assert all(a.duration is not None and a.duration >= 0 for a in attempts)
    assert attempts[0].at <= attempts[1].at <= attempts[2].at


def test_the_message_page_shows_the_timeline(three_failures: bytes) -> None:
    client = Client()
    client.force_login(User.objects.create_superuser("alice"))
    page = open_page(client, message_link(open_page(client, CHANGELIST), three_failures))
    timeline = page.text.split('class="dl-timeline"')[1].split("</table>")[0]
    rows = timeline.split('<tr class="dl-attempt ')[1:]
    assert [row.split('"')[0] for row in rows] == [
        "dl-attempt-failed",
        "dl-attempt-timeout",
        "dl-attempt-held",
    ]
    assert "ConnectionError: refused by 10.0.0.7:8443" in rows[0]
    assert "HandlerTimeout: handler did not return within 0.2 s" in rows[1]
    assert "the address book has no such user" in rows[2]
    assert all('<td class="dl-attempt-actor">drain</td>' in row for row in rows)
    assert " ms</td>" in rows[0]


def test_the_api_json_has_the_attempts_history(three_failures: bytes) -> None:
    api = APIClient()
    api.force_login(User.objects.create_superuser("root"))
    body = api.get(f"{API}/messages/{keys.to_text(three_failures)}/").json()
    got = body["attempts_history"]
    assert [a["outcome"] for a in got] == ["failed", "timeout", "held"]
    assert got[0]["error"] == "ConnectionError: refused by 10.0.0.7:8443"
    assert {a["actor"] for a in got} == {"drain"}
    assert all(isinstance(a["duration"], float) for a in got)
    assert got[1]["duration"] >= 0.2
    assert all(a["at"].endswith("Z") for a in got)


def test_a_message_that_never_failed_has_an_empty_history_in_the_api(settings: Any) -> None:
    key = store_failed_msgs("q", Message(subject="new"))
    api = APIClient()
    api.force_login(User.objects.create_superuser("root"))
    assert api.get(f"{API}/messages/{keys.to_text(key)}/").json()["attempts_history"] == []


def test_delivery_removes_the_history(three_failures: bytes) -> None:
    Drainer(["q"], DrainOptions(ignore_backoff=True)).run()
    assert parked("q") == []
    assert history.attempts_of(three_failures) == []
    assert Attempt.objects.count() == 0


def test_a_first_delivery_sends_no_statement_about_attempts(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.ok_handler"}
    store_failed_msgs("q", Message(subject="first time"))
    drainer = Drainer(["q"])
    with CaptureQueriesContext(connection) as seen:
        report = drainer.run()
    assert report.delivered == 1
    assert not [q for q in seen.captured_queries if Attempt._meta.db_table in q["sql"]]


def test_retry_now_records_its_user(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.failing_handler"}
    key = store_failed_msgs("q", Message(subject="still failing"))
    client = Client()
    client.force_login(User.objects.create_superuser("alice"))
    page = open_page(client, message_link(open_page(client, CHANGELIST), key))
    action = page.text.split('formaction="')[1].split('"')[0]
    page.submit(client, {**page.forms[0], "action": action})
    (attempt,) = history.attempts_of(key)
    assert (attempt.outcome, attempt.actor) == ("failed", "retry:alice")


def test_a_redeliver_names_its_actor_and_max_attempts_is_the_last(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.failing_handler"}
    settings.DEADLETTER_MAX_ATTEMPTS = 2
    key = store_failed_msgs("q", Message(subject="poison"))
    redeliver([key], actor="retry:bob")
    redeliver([key], actor="retry:bob")
    assert parked("q") == []
    assert [(a.outcome, a.actor) for a in history.attempts_of(key)] == [
        ("failed", "retry:bob"),
        ("max_attempts", "retry:bob"),
    ]


def test_a_service_pass_is_the_service(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.failing_handler"}
    key = store_failed_msgs("q", Message(subject="x"))
    Drainer(["q"], DrainOptions(actor="service")).run()
    assert [a.actor for a in history.attempts_of(key)] == ["service"]


def test_with_the_archive_off_a_dropped_message_takes_its_history_along(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.failing_handler"}
    settings.DEADLETTER_MAX_ATTEMPTS = 2
    settings.DEADLETTER_ARCHIVE_FOR = timedelta(0)
    key = store_failed_msgs("q", Message(subject="poison"))
    redeliver([key])
    assert len(history.attempts_of(key)) == 1
    redeliver([key])
    assert parked("q") == []
    assert Attempt.objects.count() == 0


def test_with_the_archive_on_a_dropped_message_keeps_its_history_by_key(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.failing_handler"}
    settings.DEADLETTER_MAX_ATTEMPTS = 1
    key = store_failed_msgs("q", Message(subject="poison"))
    redeliver([key])
    assert parked("q") == []
    assert [a.outcome for a in history.attempts_of(key)] == ["max_attempts"]
