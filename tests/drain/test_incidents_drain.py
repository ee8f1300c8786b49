"""Causes kept in step by the writes that record failures: a real drain's failed
attempts, its permanent failures and last attempts, and a park carrying a
`LastError` (as the Celery and Tasks captures park), each noted in the transaction
of its row change."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from deadletter import PermanentFailure
from deadletter.drain import Drainer, DrainOptions
from deadletter.models import Cause
from deadletter.queue import store_failed_msgs
from deadletter.wire.messages import Message
from tests.factories import parked

pytestmark = pytest.mark.django_db(transaction=True)

HANDLER = "tests.drain.test_incidents_drain.two_ways"


def two_ways(msg: Message) -> None:
    """Fails "a" and "b" as an unreachable host, "c" as a full disk (numbers vary)."""
    if msg.subject == "c":
        raise OSError(f"disk full writing {len(msg.subject) * 4096} bytes")
    raise ConnectionError(f"refused by 10.0.0.{ord(msg.subject)}:8443")


def permanent(msg: Message) -> None:
    raise PermanentFailure(f"user {msg.subject} was deleted")


def causes() -> list[tuple[str, str, int, str]]:
    return sorted(Cause.objects.values_list("queue", "signature", "count", "status"))


def drain(*queues: str) -> Any:
    return Drainer(list(queues), DrainOptions(ignore_backoff=True)).run()


def test_a_drain_failing_twice_with_one_error_and_once_with_another_makes_two_causes(
    settings: Any,
) -> None:
    settings.DEADLETTER_HANDLERS = {"q": HANDLER}
    for subject in "abc":
        store_failed_msgs("q", Message(subject=subject))
    assert Cause.objects.count() == 0  # a first park records no failure
    report = drain("q")
    assert report.failed == 3
    assert causes() == [
        ("q", "ConnectionError: refused by #", 2, "open"),
        ("q", "OSError: disk full writing # bytes", 1, "open"),
    ]
    drain("q")
    assert [count for _, _, count, _ in causes()] == [4, 2]
    refused = Cause.objects.get(signature__startswith="ConnectionError")
    assert refused.first_seen < refused.last_seen


def test_a_permanent_failure_is_noted(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.drain.test_incidents_drain.permanent"}
    store_failed_msgs("q", Message(subject="ann"))
    report = drain("q")
    assert report.dropped["permanent"] == 1
    assert parked("q") == []
    assert causes() == [("q", "PermanentFailure: user ann was deleted", 1, "open")]


def test_the_last_attempt_is_noted_with_the_others(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.failing_handler"}
    settings.DEADLETTER_MAX_ATTEMPTS = 2
    store_failed_msgs("q", Message(subject="poison"))
    drain("q")
    report = drain("q")
    assert report.dropped["max_attempts"] == 1
    assert causes() == [("q", "ConnectionError: timeout after # s talking to #", 2, "open")]


def test_a_delivery_notes_nothing(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.ok_handler"}
    store_failed_msgs("q", Message(subject="fine"))
    with CaptureQueriesContext(connection) as seen:
        assert drain("q").delivered == 1
    assert not [q for q in seen.captured_queries if Cause._meta.db_table in q["sql"]]


def test_a_resolved_cause_failing_again_in_a_drain_reopens(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.failing_handler"}
    store_failed_msgs("q", Message(subject="x"))
    drain("q")
    Cause.objects.update(status=Cause.Status.RESOLVED)
    drain("q")
    cause = Cause.objects.get()
    assert (cause.status, cause.reopened, cause.count) == ("open", True, 2)


def captured(subject: str) -> Message:
    """A message as a capture parks it: the task's failure already in `LastError`."""
    return Message(
        subject=subject,
        extra={"Attempts": 1, "LastError": f"SMTPServerDisconnected: lost after {subject} s"},
    )


def test_a_park_carrying_a_last_error_is_noted_as_a_capture_parks_it() -> None:
    store_failed_msgs("celery.mail", captured("3"))
    store_failed_msgs("celery.mail", captured("4"))
    store_failed_msgs("celery.mail", Message(subject="no failure said"))
    assert causes() == [("celery.mail", "SMTPServerDisconnected: lost after # s", 2, "open")]


def test_a_park_inside_a_transaction_that_rolls_back_keeps_its_row_and_its_note() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        store_failed_msgs("tasks.default", captured("5"))
        raise RuntimeError("the view failed after parking")
    assert len(parked("tasks.default")) == 1
    assert causes() == [("tasks.default", "SMTPServerDisconnected: lost after # s", 1, "open")]


def test_a_park_inside_a_transaction_that_commits_is_noted_once() -> None:
    with transaction.atomic():
        store_failed_msgs("tasks.default", captured("6"))
        store_failed_msgs("tasks.default", captured("7"))
    assert len(parked("tasks.default")) == 2
    assert causes() == [("tasks.default", "SMTPServerDisconnected: lost after # s", 2, "open")]
