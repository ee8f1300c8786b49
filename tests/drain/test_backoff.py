"""Backoff and breaker: a failed message is not handed over again before its wait
is over (and never twice in one pass), a waiting one costs no attempt and is
counted, and K failures in a row stop a queue for the rest of the pass."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
import time_machine
from django.core.management import CommandError, call_command

from deadletter import NeedsOperator, drain
from deadletter.drain import Drainer, DrainOptions
from deadletter.drain.policy import HELD_WAIT, JITTER
from deadletter.models import QueuedMessage, QueuePass
from deadletter.wire.messages import Message
from tests.factories import park, parked, parked_messages

pytestmark = pytest.mark.django_db(transaction=True)

calls: list[str] = []


def flaky(msg: Message) -> None:
    """Fails every delivery, noting each call."""
    calls.append(msg.subject)
    raise ConnectionError("endpoint down")


def fails_unless_ok(msg: Message) -> None:
    """Delivers a message whose subject starts with "ok", fails the others."""
    calls.append(msg.subject)
    if not msg.subject.startswith("ok"):
        raise ConnectionError("endpoint down")


def needs_operator(msg: Message) -> None:
    """Cannot act on any message until an operator does something, noting each call."""
    calls.append(msg.subject)
    raise NeedsOperator("task billing.charge is not registered in this process")


@pytest.fixture(autouse=True)
def no_calls() -> Iterator[None]:
    calls.clear()
    yield
    calls.clear()


T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> Any:
    return time_machine.travel(T0 + timedelta(seconds=seconds), tick=False)


def policy(settings: Any, handler: str = "flaky", **limits: Any) -> None:
    settings.DEADLETTER_HANDLERS = {
        "q": {"handler": f"tests.drain.test_backoff.{handler}", **limits}
    }


def attempts(queue_name: str = "q") -> list[int]:
    return [m.extra.get("Attempts", 0) for m in parked_messages(queue_name)]


def test_attempts_are_spaced_by_the_backoff_and_a_waiting_message_costs_none(
    settings: Any,
) -> None:
    policy(settings, backoff=[60, 3600])
    with at(0):
        park("m")
        report = Drainer().run()
    assert (calls, report.failed, report.waiting) == (["m"], 1, 0)
    low, high = 60 * (1 - JITTER), 120 * (1 - JITTER)
    for second, handed_over in [(1, False), (low - 1, False), (60 * (1 + JITTER) + 1, True)]:
        calls.clear()
        with at(second):
            report = Drainer().run()
        assert (calls == ["m"]) is handed_over, second
        assert report.waiting == (0 if handed_over else 1)
    assert attempts() == [2]
    # After the second failure the wait is twice the first.
    base = 60 * (1 + JITTER) + 1
    for second, handed_over in [(base + high - 1, False), (base + 120 * (1 + JITTER) + 1, True)]:
        calls.clear()
        with at(second):
            Drainer().run()
        assert (calls == ["m"]) is handed_over, second
    assert attempts() == [3]


def test_a_message_that_failed_is_not_handed_over_again_in_the_same_pass(settings: Any) -> None:
    policy(settings, backoff=[0.001, 0.001])
    park("a", "b", "c")
    report = Drainer().run()
    assert calls == ["a", "b", "c"] and report.failed == 3
    assert attempts() == [1, 1, 1]


def test_without_a_backoff_a_failed_message_is_tried_on_every_pass(settings: Any) -> None:
    policy(settings)
    park("m")
    for _ in range(3):
        Drainer().run()
    assert calls == ["m", "m", "m"]
    assert QueuedMessage.objects.get().due_at is None


def test_without_a_backoff_a_message_kept_for_an_operator_waits_the_held_wait(
    settings: Any,
) -> None:
    policy(settings, handler="needs_operator")
    with at(0):
        park("m")
        first = Drainer().run()
    for second, handed_over in [(1, False), (HELD_WAIT - 1, False), (HELD_WAIT + 1, True)]:
        calls.clear()
        with at(second):
            report = Drainer().run()
        assert (calls == ["m"]) is handed_over, second
        assert (report.waiting, report.held) == ((0, 1) if handed_over else (1, 0)), second
    assert first.held == 1 and attempts() == [0]


def test_a_message_kept_for_an_operator_waits_its_queues_backoff(settings: Any) -> None:
    policy(settings, handler="needs_operator", backoff=[600, 600])
    with at(0):
        park("m")
        Drainer().run()
    for second, handed_over in [(600 * (1 - JITTER) - 1, False), (600 * (1 + JITTER) + 1, True)]:
        calls.clear()
        with at(second):
            Drainer().run()
        assert (calls == ["m"]) is handed_over, second


def test_a_message_kept_for_an_operator_does_not_trip_the_breaker(settings: Any) -> None:
    policy(settings, handler="needs_operator", breaker=1)
    park("a", "b")
    report = Drainer().run()
    assert (calls, report.held, report.paused) == (["a", "b"], 2, [])


def test_a_waiting_message_is_reported_with_when_it_is_next_due(settings: Any) -> None:
    policy(settings, backoff=[600, 600])
    with at(0):
        park("m", "n")
        Drainer().run()
    with at(10):
        out = StringIO()
        call_command("deadletter_drain", "--format", "json", stdout=out)  # waiting is no failure
        summary = json.loads(out.getvalue())
        assert summary["waiting"] == 2 and summary["failed"] == 0
        due = datetime.fromisoformat(summary["next_due"])
        assert T0 + timedelta(seconds=540) <= due <= T0 + timedelta(seconds=660)
        text = StringIO()
        call_command("deadletter_drain", stdout=text)
        assert "waiting:      2 (backoff; the next is due 2026-12-01T12:" in text.getvalue()
    assert calls == ["m", "n"]


def test_a_dry_run_lists_each_waiting_message_with_its_due_time(settings: Any) -> None:
    policy(settings, backoff=[600, 600])
    with at(0):
        park("m")
        Drainer().run()
    park("fresh")
    with at(10):
        out = StringIO()
        call_command("deadletter_drain", "--dry-run", "--format", "json", stdout=out)
    report = json.loads(out.getvalue())
    assert report["would"] == {"deliver": 1, "waiting": 1, "expired": 0, "corrupt": 0}
    (waiting,) = [m for m in report["messages"] if m["action"] == "waiting"]
    assert waiting["subject"] == "m" and waiting["due_at"].startswith("2026-12-01T12:")
    with at(10):
        text = StringIO()
        call_command("deadletter_drain", "--dry-run", stdout=text)
    assert "of q waiting: due 2026-12-01" in text.getvalue()


def test_retrying_a_waiting_message_by_hand_ignores_its_backoff(settings: Any) -> None:
    policy(settings, backoff=[600, 600])
    with at(0):
        (key,) = park("m")
        Drainer().run()
    with at(10):
        assert Drainer().run().waiting == 1
        report = drain.redeliver([key])
    assert calls == ["m", "m"] and report.failed == 1
    assert attempts() == [2]


def test_an_operators_drain_can_ignore_the_backoff(settings: Any) -> None:
    policy(settings, backoff=[600, 600])
    with at(0):
        park("m")
        Drainer().run()
    calls.clear()
    with at(10):
        assert Drainer(options=DrainOptions(ignore_backoff=True)).run().failed == 1
    assert calls == ["m"]


def test_the_breaker_stops_the_queue_after_exactly_k_failures_in_a_row(settings: Any) -> None:
    policy(settings, breaker=3)
    park(*[f"m{i}" for i in range(10)])
    report = Drainer().run()
    assert calls == ["m0", "m1", "m2"]
    assert (report.failed, report.paused, report.exit_code) == (3, ["q"], 1)
    assert attempts() == [1, 1, 1] + [0] * 7  # the rest untouched
    assert QueuePass.objects.get(queue="q").paused
    calls.clear()
    Drainer().run()  # the next pass starts afresh
    assert len(calls) == 3


def test_a_delivery_resets_the_breakers_count(settings: Any) -> None:
    policy(settings, handler="fails_unless_ok", breaker=3)
    park("a", "b", "ok1", "c", "d", "ok2", "e", "f")
    report = Drainer().run()
    assert report.paused == [] and report.delivered == 2 and report.failed == 6
    assert not QueuePass.objects.get(queue="q").paused


def test_the_breaker_and_the_json_summary_say_which_queue_paused(settings: Any) -> None:
    policy(settings, breaker=1)
    park("a", "b")
    out = StringIO()
    with pytest.raises(CommandError) as stopped:
        call_command("deadletter_drain", "--format", "json", stdout=out)
    assert stopped.value.returncode == 1
    assert json.loads(out.getvalue())["paused"] == ["q"]
    text = StringIO()
    with pytest.raises(CommandError):
        call_command("deadletter_drain", stdout=text)
    assert "paused:       q (breaker" in text.getvalue()


def test_a_queues_own_max_attempts_wins_over_the_global_one(settings: Any) -> None:
    settings.DEADLETTER_MAX_ATTEMPTS = 10
    policy(settings, max_attempts=2)
    park("m")
    Drainer().run()
    Drainer().run()
    assert parked() == [] and calls == ["m", "m"]


def test_backoff_breaker_and_max_attempts_together(settings: Any) -> None:
    policy(settings, backoff=[60, 60], breaker=2, max_attempts=2)
    with at(0):
        park("a", "b", "c")
        first = Drainer().run()
    assert (calls, first.paused) == (["a", "b"], ["q"])
    calls.clear()
    with at(1):
        second = Drainer().run()  # a and b wait; c is fresh
    assert calls == ["c"] and second.waiting == 2 and second.paused == []
    calls.clear()
    with at(200):
        third = Drainer().run()  # every retry is due: two last attempts trip the breaker
    assert len(calls) == 2 and third.dropped["max_attempts"] == 2 and third.paused == ["q"]
    assert len(parked()) == 1
