"""`deadletter_drain --forever` runs stored redrives between its passes, a turn at a
time: a long redrive is handed back as planned at the end of its turn, so the
queues' own passes keep coming, and a stopping service hands it back too."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from deadletter.drain import Drainer, DrainReport, plan_redrive, serve
from deadletter.drain import service as drain_service
from deadletter.models import QueuedMessage, Redrive
from tests.drain import redrive_harness
from tests.factories import park, parked

pytestmark = pytest.mark.django_db(transaction=True)

HARNESS = "tests.drain.redrive_harness"


@pytest.fixture(autouse=True)
def handlers(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {
        "q": f"{HARNESS}.recording_handler",
        "slow": f"{HARNESS}.slow_handler",
    }
    redrive_harness.HANDED.clear()


def _waiting(*subjects: str, queue: str = "q") -> list[bytes]:
    """Messages a backoff holds for an hour: a pass leaves them alone."""
    parked_keys = park(*subjects, queue=queue)
    later = datetime.now(UTC) + timedelta(hours=1)
    QueuedMessage.objects.filter(key__in=parked_keys).update(due_at=later)
    return parked_keys


def test_the_service_runs_a_planned_redrive_after_its_pass() -> None:
    _waiting("a", "b")
    redrive = plan_redrive(queue="q", ignore_backoff=True)
    seen: list[int] = []
    done = serve(Drainer(), interval=0, passes=1, on_pass=lambda r: seen.append(r.waiting))
    assert seen == [2]  # the pass left them to their backoff
    assert done.redrives == 1
    assert Redrive.objects.get(pk=redrive.pk).status == "finished"
    assert redrive_harness.HANDED == ["a", "b"] and parked() == []


def test_a_move_of_a_queue_no_handler_serves_is_run_too() -> None:
    park("a", "b", queue="unserved")
    redrive = plan_redrive(queue="unserved", destination="q")
    serve(Drainer(), interval=0, passes=1)
    assert Redrive.objects.get(pk=redrive.pk).moved == 2
    assert parked("unserved") == []


def test_a_long_redrive_is_run_a_turn_at_a_time_between_passes(monkeypatch: Any) -> None:
    monkeypatch.setattr(drain_service, "REDRIVE_TURN", 0.3)
    _waiting(*[f"m{i}" for i in range(6)], queue="slow")
    redrive = plan_redrive(queue="slow", ignore_backoff=True, rate=10)
    after_pass: list[tuple[str, int]] = []

    def each(report: DrainReport) -> None:
        row = Redrive.objects.get(pk=redrive.pk)
        after_pass.append((row.status, row.delivered))

    serve(Drainer(), interval=0, passes=12, on_pass=each)
    row = Redrive.objects.get(pk=redrive.pk)
    assert (row.status, row.delivered) == ("finished", 6)
    # Between two turns the redrive waited as planned, part done, while a pass ran.
    assert any(status == "planned" and 0 < n < 6 for status, n in after_pass)


def test_a_stopping_service_hands_its_redrive_back_as_planned() -> None:
    _waiting(*[f"m{i}" for i in range(20)], queue="slow")
    redrive = plan_redrive(queue="slow", ignore_backoff=True)
    drainer = Drainer()
    timer = threading.Timer(0.4, drainer.stop, args=("SIGTERM",))
    timer.start()
    try:
        serve(drainer, interval=3600)
    finally:
        timer.cancel()
    row = Redrive.objects.get(pk=redrive.pk)
    assert (row.status, row.runner) == ("planned", "")
    assert 0 < row.delivered < 20 and row.remaining == 20 - row.delivered
