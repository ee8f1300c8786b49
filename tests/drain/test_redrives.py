"""A redrive counts what it matches first (the plan, bounded by the queue's tail
then), hands those messages over through the drain's loop under its rules, at
most at its rate, step by step through its ramp, stopping itself when a step
fails too often; with a destination it moves them instead. Its row holds the
counts and the cursor as it goes."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from deadletter.drain.delivery import Stop
from deadletter.drain.redrive_run import RELEASE, STALE_AFTER, run_redrive
from deadletter.drain.redrive_turns import resume_redrives
from deadletter.drain.redrives import RedriveError, cancel_redrive, plan_redrive
from deadletter.models import QueuedMessage, Redrive
from deadletter.wire import keys
from deadletter.wire.gotime import GoTime
from tests.drain import redrive_harness
from tests.factories import park, parked, parked_messages

pytestmark = pytest.mark.django_db(transaction=True)

HARNESS = "tests.drain.redrive_harness"


@pytest.fixture(autouse=True)
def handlers(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {
        "q": f"{HARNESS}.recording_handler",
        "picky": f"{HARNESS}.picky_handler",
        "gated": f"{HARNESS}.gated_handler",
        "slow": f"{HARNESS}.slow_handler",
    }
    redrive_harness.HANDED.clear()
    redrive_harness.GATE.clear()


# --- the plan ----------------------------------------------------------------------


def test_the_plan_counts_the_queue_up_to_its_tail_and_is_stored_as_planned() -> None:
    keys_parked = park("a", "b", "c")
    park("elsewhere", queue="other")
    redrive = plan_redrive(queue="q", started_by="alice")
    stored = Redrive.objects.get(pk=redrive.pk)
    assert (stored.status, stored.matched, stored.remaining) == ("planned", 3, 3)
    assert stored.until == keys_parked[-1]
    assert stored.started_by == "alice" and stored.created_at is not None


def test_what_is_parked_after_the_plan_is_not_in_it() -> None:
    park("a", "b")
    redrive = plan_redrive(queue="q")
    park("later")
    done = run_redrive(redrive.pk)
    assert redrive_harness.HANDED == ["a", "b"]
    assert parked("q") == ["later"]
    assert (done.status, done.delivered, done.remaining) == ("finished", 2, 0)


def test_a_redrive_that_may_not_reveal_never_matches_a_redacted_value(settings: Any) -> None:
    settings.DEADLETTER_REDACT = {"q": ["username"]}
    park("refund", username="ada@example.com")
    park("ada herself", username="someone")
    blind = plan_redrive(queue="q", search="ada", reveal=False)
    assert blind.matched == 1
    done = run_redrive(blind.pk)
    assert redrive_harness.HANDED == ["ada herself"]
    assert (done.delivered, done.remaining) == (1, 0)
    assert plan_redrive(queue="q", search="ada").matched == 1  # what is left: the other
    assert parked("q") == ["refund"]


def test_a_plan_that_is_not_saved_stores_nothing() -> None:
    park("a")
    redrive = plan_redrive(queue="q", save=False)
    assert redrive.matched == 1 and redrive.pk is None
    assert not Redrive.objects.exists()


@pytest.mark.parametrize(
    ("asked", "message"),
    [
        ({"queue": "nowhere"}, "no handler configured"),
        ({"queue": "bad\x00name"}, "the queue"),
        ({"queue": "q", "destination": "q"}, "the destination is the queue itself"),
        ({"queue": "q", "destination": "typo"}, "no queue 'typo' to move into"),
        ({"queue": "q", "rate": 0}, "rate must be above 0"),
        ({"queue": "q", "rate": -2.5}, "rate must be above 0"),
        ({"queue": "q", "ramp": [1, 0]}, "ramp steps must be whole numbers"),
        ({"queue": "q", "ramp": [1, 2.5]}, "ramp steps must be whole numbers"),
        ({"queue": "q", "stop_after": 0}, "stop-after must be a percentage"),
        ({"queue": "q", "stop_after": 101}, "stop-after must be a percentage"),
        ({"queue": "q", "concurrency": 0}, "concurrency must be"),
        ({"queue": "q", "concurrency": 100_000}, "concurrency must be"),
        ({"queue": "q", "destination": "other", "ramp": [1]}, "a move calls no handler"),
        ({"queue": "q", "destination": "other", "stop_after": 5}, "a move calls no handler"),
        (
            {
                "queue": "q",
                "after": datetime(2026, 2, 1, tzinfo=UTC),
                "before": datetime(2026, 1, 1, tzinfo=UTC),
            },
            "must be earlier than",
        ),
        ({"queue": "q", "after": datetime(2026, 2, 1)}, "aware datetime"),
    ],
)
def test_bad_input_is_one_clear_error_and_nothing_is_stored(
    asked: dict[str, Any], message: str
) -> None:
    park("a")
    park("x", queue="other")
    with pytest.raises(RedriveError, match=message):
        plan_redrive(**asked)
    assert not Redrive.objects.exists()


def test_a_search_narrows_the_plan_and_the_run_to_its_matches() -> None:
    park("refund order", "welcome mail", "refund late")
    redrive = plan_redrive(queue="q", search="refund")
    assert redrive.matched == 2
    done = run_redrive(redrive.pk)
    assert redrive_harness.HANDED == ["refund order", "refund late"]
    assert parked("q") == ["welcome mail"]
    assert (done.delivered, done.remaining) == (2, 0)


def test_after_and_before_bound_the_first_failure() -> None:
    now = datetime.now(UTC)
    park("old", queued_at=GoTime.from_datetime(now - timedelta(days=3)))
    park("new", queued_at=GoTime.from_datetime(now - timedelta(hours=1)))
    redrive = plan_redrive(queue="q", after=now - timedelta(days=1))
    assert redrive.matched == 1
    run_redrive(redrive.pk)
    assert redrive_harness.HANDED == ["new"]
    assert plan_redrive(queue="q", before=now - timedelta(days=1)).matched == 1


def test_a_malformed_search_is_a_redrive_error() -> None:
    park("a")
    with pytest.raises(RedriveError):
        plan_redrive(queue="q", search='subject:"unclosed')
    assert not Redrive.objects.exists()


# --- the run -----------------------------------------------------------------------


def test_a_run_hands_every_matching_message_over_oldest_first_and_finishes() -> None:
    parked_keys = park("a", "b", "c")
    done = run_redrive(plan_redrive(queue="q").pk)
    assert redrive_harness.HANDED == ["a", "b", "c"]
    assert parked("q") == []
    assert (done.status, done.delivered, done.failed, done.remaining) == ("finished", 3, 0, 0)
    assert done.cursor == parked_keys[-1]
    assert done.runner and done.started_at and done.finished_at


def test_a_message_that_fails_again_stays_with_its_attempt_counted() -> None:
    park("good", "bad-1", queue="picky")
    done = run_redrive(plan_redrive(queue="picky").pk)
    assert (done.delivered, done.failed) == (1, 1)
    (left,) = parked_messages("picky")
    assert left.subject == "bad-1" and left.extra["Attempts"] == 1


def test_a_message_waiting_on_its_backoff_is_left_unless_ignore_backoff() -> None:
    first, _ = park("waiting", "due")
    QueuedMessage.objects.filter(key=first).update(due_at=datetime.now(UTC) + timedelta(hours=1))
    done = run_redrive(plan_redrive(queue="q").pk)
    assert redrive_harness.HANDED == ["due"]
    assert "1 waiting on a backoff" in done.reason
    done = run_redrive(plan_redrive(queue="q", ignore_backoff=True).pk)
    assert redrive_harness.HANDED == ["due", "waiting"]


def test_a_run_of_a_redrive_that_is_not_planned_is_refused() -> None:
    park("a")
    redrive = plan_redrive(queue="q")
    run_redrive(redrive.pk)
    with pytest.raises(RedriveError, match="cannot be run: it is finished"):
        run_redrive(redrive.pk)
    with pytest.raises(RedriveError, match="no redrive"):
        run_redrive(redrive.pk + 100)


def test_n_messages_at_rate_r_take_at_least_n_minus_one_over_r_seconds() -> None:
    park(*[f"m{i}" for i in range(6)])
    redrive = plan_redrive(queue="q", rate=25)
    started = time.monotonic()
    done = run_redrive(redrive.pk)
    assert done.delivered == 6
    assert time.monotonic() - started >= 5 / 25


def test_the_ramp_hands_over_its_step_sizes_then_the_last_one_again() -> None:
    # Steps of 1, 2, 3, then 3 again: judged after messages 1, 3, 6, 9, 12; the
    # fourth step (messages 7 to 9) holds the two failures.
    subjects = [f"ok-{i}" for i in range(1, 8)] + ["bad-8", "bad-9"]
    park(*subjects, "ok-10", "ok-11", "ok-12", queue="picky")
    done = run_redrive(plan_redrive(queue="picky", ramp=[1, 2, 3], stop_after=50).pk)
    assert "2 of 3 message(s) of step 4 failed again" in done.reason
    assert subjects == redrive_harness.HANDED
    assert (done.delivered, done.failed, done.remaining) == (7, 2, 3)


def test_the_ramp_alone_hands_every_message_over() -> None:
    park(*[f"m{i}" for i in range(10)])
    done = run_redrive(plan_redrive(queue="q", ramp=[1, 2, 3]).pk)
    assert (done.status, done.delivered) == ("finished", 10)


def test_stop_after_stops_at_the_first_step_that_fails_too_often() -> None:
    # Steps of 1, 2, then 2 again: the first two steps deliver, the third fails both.
    park("ok-1", "ok-2", "ok-3", "bad-1", "bad-2", "ok-4", queue="picky")
    done = run_redrive(plan_redrive(queue="picky", ramp=[1, 2], stop_after=50).pk)
    assert redrive_harness.HANDED == ["ok-1", "ok-2", "ok-3", "bad-1", "bad-2"]
    assert done.status == "stopped"
    assert "2 of 2 message(s) of step 3 failed again (more than 50 %)" in done.reason
    assert (done.delivered, done.failed, done.remaining) == (3, 2, 1)
    assert parked("picky") == ["bad-1", "bad-2", "ok-4"]


def test_stop_after_judges_a_whole_step_not_each_message() -> None:
    park("ok-1", "bad-1", "ok-2", "bad-2", "bad-3", "bad-4", "ok-3", queue="picky")
    done = run_redrive(plan_redrive(queue="picky", ramp=[2], stop_after=50).pk)
    # Steps of 2: 50 % fail in the first two (not more than 50), all in the third.
    assert done.status == "stopped"
    assert "2 of 2 message(s) of step 3 failed again (more than 50 %)" in done.reason
    assert redrive_harness.HANDED == ["ok-1", "bad-1", "ok-2", "bad-2", "bad-3", "bad-4"]
    assert (done.delivered, done.failed, done.remaining) == (2, 4, 1)


def test_a_canary_step_of_one_stops_a_redrive_against_a_down_endpoint() -> None:
    park("bad-1", "bad-2", "bad-3", queue="picky")
    done = run_redrive(plan_redrive(queue="picky", ramp=[1, 5], stop_after=10).pk)
    assert redrive_harness.HANDED == ["bad-1"]
    assert (done.status, done.failed, done.remaining) == ("stopped", 1, 2)


def test_with_concurrency_every_message_is_handed_over_and_the_cursor_ends_at_the_last() -> None:
    parked_keys = park(*[f"m{i}" for i in range(12)], queue="slow")
    done = run_redrive(plan_redrive(queue="slow", concurrency=4).pk)
    assert sorted(redrive_harness.HANDED) == sorted(f"m{i}" for i in range(12))
    assert (done.status, done.delivered, done.remaining) == ("finished", 12, 0)
    assert done.cursor == parked_keys[-1]
    assert parked("slow") == []


# --- moves -------------------------------------------------------------------------


def test_a_move_redrive_moves_every_match_keeping_times_and_sequences() -> None:
    moved = park("a", "b", "c")
    park("x", queue="other")
    done = run_redrive(plan_redrive(queue="q", destination="other").pk)
    assert (done.status, done.moved, done.delivered, done.remaining) == ("finished", 3, 0, 0)
    assert redrive_harness.HANDED == []
    assert parked("q") == []
    other = QueuedMessage.objects.of_queue("other").values_list("key", flat=True)
    assert {keys.make_key("other", *keys.parse_key(k)[1:]) for k in moved} <= set(other)
    assert [m.subject for m in parked_messages("other")] == ["a", "b", "c", "x"]


# --- cancel, stop, resume ------------------------------------------------------------


def test_a_cancel_from_another_thread_stops_the_run_after_the_message_in_hand() -> None:
    park(*[f"m{i}" for i in range(5)], queue="gated")
    redrive = plan_redrive(queue="gated")
    result: list[Redrive] = []
    runner = threading.Thread(target=lambda: result.append(run_redrive(redrive.pk)))
    runner.start()
    try:
        deadline = time.monotonic() + 10
        while not redrive_harness.HANDED and time.monotonic() < deadline:
            time.sleep(0.01)
        cancelled = cancel_redrive(redrive.pk)
        assert cancelled.status == "cancelled"
        time.sleep(1.5)  # the run looks at its row once a second
    finally:
        redrive_harness.GATE.set()
        runner.join(30)
    (done,) = result
    assert done.status == "cancelled"
    assert redrive_harness.HANDED == ["m0"]
    assert (done.delivered, done.remaining) == (1, 4)
    assert len(parked("gated")) == 4


def test_cancel_of_an_ended_redrive_is_refused() -> None:
    park("a")
    redrive = plan_redrive(queue="q")
    run_redrive(redrive.pk)
    with pytest.raises(RedriveError, match="has ended"):
        cancel_redrive(redrive.pk)


def test_a_stop_leaves_it_stopped_and_resume_carries_on_from_the_cursor() -> None:
    park(*[f"m{i}" for i in range(4)])
    stop = Stop()

    def after_two(redrive: Redrive) -> None:
        if redrive.delivered == 2:
            stop("SIGINT")

    redrive = plan_redrive(queue="q")
    done = run_redrive(redrive.pk, stop=stop, on_progress=after_two)
    assert (done.status, done.delivered, done.remaining) == ("stopped", 2, 2)
    assert "SIGINT" in done.reason and f"--resume {redrive.pk}" in done.reason
    with pytest.raises(RedriveError):
        run_redrive(redrive.pk)  # stopped by an operator: only a resume carries on
    assert resume_redrives() == []
    (resumed,) = resume_redrives(redrive.pk)
    assert (resumed.status, resumed.delivered, resumed.remaining) == ("finished", 4, 0)
    assert redrive_harness.HANDED == ["m0", "m1", "m2", "m3"]


def test_a_released_redrive_is_planned_again_for_any_runner() -> None:
    park("a", "b")
    stop = Stop()
    redrive = plan_redrive(queue="q")
    done = run_redrive(redrive.pk, stop=stop, on_progress=lambda r: stop(RELEASE))
    assert (done.status, done.runner, done.delivered) == ("planned", "", 1)
    (resumed,) = resume_redrives()
    assert (resumed.status, resumed.delivered) == ("finished", 2)


def test_resume_takes_over_a_running_redrive_whose_heartbeat_is_stale_only() -> None:
    park("a")
    redrive = plan_redrive(queue="q")
    fresh = datetime.now(UTC)
    Redrive.objects.filter(pk=redrive.pk).update(
        status="running", runner="elsewhere:1", heartbeat_at=fresh
    )
    assert resume_redrives() == []
    with pytest.raises(RedriveError, match="being run by elsewhere:1"):
        run_redrive(redrive.pk)
    Redrive.objects.filter(pk=redrive.pk).update(
        heartbeat_at=fresh - timedelta(seconds=STALE_AFTER + 1)
    )
    (done,) = resume_redrives()
    assert (done.status, done.delivered) == ("finished", 1)
