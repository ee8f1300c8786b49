"""A redrive's counts add up to what it matched, and a finished one says why each
message it did not hand over was left: gone before it reached them (delivered by
a drain, deleted), held by another drain, waiting on a backoff. A run that takes
over a killed one counts what that one settled from its marks, and hands over
again only what it never settled."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection, transaction

from deadletter import queue
from deadletter.drain.redrive_run import run_redrive
from deadletter.drain.redrive_turns import resume_redrives
from deadletter.drain.redrives import plan_redrive
from deadletter.models import QueuedMessage, Redrive
from deadletter.models.redrives import RedriveMark
from deadletter.queue import archive
from tests.drain import redrive_harness
from tests.factories import park, parked

pytestmark = pytest.mark.django_db(transaction=True)

HARNESS = "tests.drain.redrive_harness"


@pytest.fixture(autouse=True)
def handlers(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": f"{HARNESS}.recording_handler"}
    redrive_harness.HANDED.clear()


def test_messages_delivered_or_deleted_before_the_run_are_named_gone() -> None:
    first, second, third, *_ = park("a", "b", "c", "d", "e")
    redrive = plan_redrive(queue="q")
    assert queue.dequeue(first) and queue.dequeue(second)  # a drain delivered them
    archive.discard(third, actor="bob")  # an operator deleted it
    done = run_redrive(redrive.pk)
    assert (done.status, done.matched, done.delivered, done.gone, done.remaining) == (
        "finished",
        5,
        2,
        3,
        3,
    )
    assert done.reason.startswith("3 not handed over: 3 gone before the redrive reached them")


def test_a_message_waiting_on_its_backoff_is_remaining_with_its_reason() -> None:
    first, _ = park("waiting", "due")
    QueuedMessage.objects.filter(key=first).update(due_at=datetime.now(UTC) + timedelta(hours=1))
    done = run_redrive(plan_redrive(queue="q").pk)
    assert (done.delivered, done.waiting, done.gone, done.remaining) == (1, 1, 0, 1)
    assert done.reason == "1 not handed over: 1 waiting on a backoff (left to the drain)"


def test_a_message_another_drain_holds_is_remaining_as_held() -> None:
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has no row locks: a redrive waits for the queue's lock instead")
    first, _ = park("held", "free")
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                QueuedMessage.objects.select_for_update().get(key=first)
                locked.set()
                release.wait(30)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(30)
        done = run_redrive(plan_redrive(queue="q").pk)
    finally:
        release.set()
        holder.join(30)
    assert (done.delivered, done.held, done.remaining) == (1, 1, 1)
    assert done.reason == "1 not handed over: 1 held by another drain"
    assert parked() == ["held"]


def _killed_while_running(redrive: Redrive) -> None:
    """The redrive as a run SIGKILLed in this host left it: running, its runner gone."""
    Redrive.objects.filter(pk=redrive.pk).update(
        status="running", runner="gone-host:1", heartbeat_at=datetime.now(UTC) - timedelta(hours=1)
    )


def test_a_takeover_counts_a_message_the_killed_run_delivered_and_did_not_count() -> None:
    keys_parked = park("a", "b", "c")
    redrive = plan_redrive(queue="q")
    RedriveMark.objects.create(redrive=redrive, key=keys_parked[0], taken_at=datetime.now(UTC))
    assert queue.dequeue(keys_parked[0])  # its delivery committed, then the kill
    _killed_while_running(redrive)
    (done,) = resume_redrives()
    assert (done.status, done.delivered, done.remaining, done.reason) == ("finished", 3, 0, "")
    assert redrive_harness.HANDED == ["b", "c"]
    assert not RedriveMark.objects.exists()


def test_a_takeover_hands_over_again_a_message_the_killed_run_never_settled() -> None:
    keys_parked = park("a", "b")
    redrive = plan_redrive(queue="q")
    RedriveMark.objects.create(redrive=redrive, key=keys_parked[0], taken_at=datetime.now(UTC))
    _killed_while_running(redrive)  # killed while its handler ran: the row is as it was
    (done,) = resume_redrives()
    assert (done.status, done.delivered, done.remaining) == ("finished", 2, 0)
    assert redrive_harness.HANDED == ["a", "b"]


def test_a_key_counted_past_the_cursor_is_not_counted_again() -> None:
    keys_parked = park("a", "b", "c")
    redrive = plan_redrive(queue="q")
    # A run with two in hand counted "b" (it failed and stays) while "a" was in hand.
    RedriveMark.objects.create(
        redrive=redrive, key=keys_parked[1], counted=True, taken_at=datetime.now(UTC)
    )
    Redrive.objects.filter(pk=redrive.pk).update(failed=1, remaining=2)
    _killed_while_running(redrive)
    (done,) = resume_redrives()
    assert (done.delivered, done.failed, done.remaining) == (2, 1, 0)
    assert redrive_harness.HANDED == ["a", "c"]
