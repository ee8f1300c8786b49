"""Causes as incidents (`queue.incidents`): one upsert a failure counts it, moves its
last seen, reopens it after a resolve; a mute reads open once its time is past."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from deadletter.models import Cause
from deadletter.queue import incidents

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SIG = "ConnectionError: refused by #.#.#.#:#"


def note(signature: str | None = SIG, at: datetime = T0, *, queue: str = "q", n: int = 1) -> None:
    with transaction.atomic():
        incidents.note_failure(connection, queue, signature, at=at, n=n)


def test_the_first_failure_opens_a_cause_seen_then() -> None:
    note()
    cause = Cause.objects.get()
    assert (cause.queue, cause.signature, cause.count) == ("q", SIG, 1)
    assert cause.first_seen == cause.last_seen == cause.opened_at == T0
    assert (cause.status, cause.reopened, cause.resolved_at) == ("open", False, None)


def test_later_failures_add_to_the_count_and_move_last_seen_only() -> None:
    note()
    note(at=T0 + timedelta(minutes=5))
    note(at=T0 + timedelta(minutes=9), n=3)
    cause = Cause.objects.get()
    assert cause.count == 5
    assert cause.first_seen == cause.opened_at == T0
    assert cause.last_seen == T0 + timedelta(minutes=9)


def test_a_failure_noted_late_never_moves_last_seen_back() -> None:
    note(at=T0 + timedelta(hours=1))
    note(at=T0)
    cause = Cause.objects.get()
    assert (cause.count, cause.last_seen) == (2, T0 + timedelta(hours=1))


def test_each_queue_and_signature_is_its_own_cause() -> None:
    note(queue="a")
    note(queue="b")
    note("TimeoutError: read timed out", queue="a")
    got = sorted(Cause.objects.values_list("queue", "signature", "count"))
    assert got == [("a", SIG, 1), ("a", "TimeoutError: read timed out", 1), ("b", SIG, 1)]


def test_no_signature_notes_nothing_and_sends_nothing() -> None:
    with CaptureQueriesContext(connection) as seen:
        incidents.note_failure(connection, "q", None, at=T0)
    assert seen.captured_queries == []
    assert not Cause.objects.exists()


def test_a_note_is_one_statement_with_no_read_first() -> None:
    note()
    with transaction.atomic(), CaptureQueriesContext(connection) as seen:
        incidents.note_failure(connection, "q", SIG, at=T0 + timedelta(seconds=1))
    (statement,) = [q["sql"] for q in seen.captured_queries]
    assert statement.startswith("INSERT INTO")
    assert "COUNT(" not in statement.upper()


def test_a_resolved_cause_seen_again_reopens() -> None:
    note()
    (cause,) = Cause.objects.all()
    incidents.acknowledge([cause.id], owner="alice", note="looking")
    assert incidents.resolve([cause.id], actor="alice", at=T0 + timedelta(hours=1)) == 1
    cause.refresh_from_db()
    assert (cause.status, cause.resolved_at) == ("resolved", T0 + timedelta(hours=1))
    assert incidents.open_causes() == []
    note(at=T0 + timedelta(hours=2))
    cause.refresh_from_db()
    assert (cause.status, cause.reopened, cause.resolved_at) == ("open", True, None)
    assert cause.opened_at == T0 + timedelta(hours=2)
    assert cause.first_seen == T0
    assert cause.count == 2
    assert (cause.owner, cause.note) == ("alice", "looking")  # who knew it stays said


def test_an_acknowledged_cause_stays_acknowledged_when_it_fails_again() -> None:
    note()
    (cause,) = Cause.objects.all()
    incidents.acknowledge([cause.id], owner="bob")
    note(at=T0 + timedelta(minutes=1))
    cause.refresh_from_db()
    assert (cause.status, cause.owner, cause.count, cause.reopened) == (
        "acknowledged",
        "bob",
        2,
        False,
    )
    assert cause.opened_at == T0


def test_a_mute_reads_muted_until_its_time_then_open() -> None:
    note()
    (cause,) = Cause.objects.all()
    until = T0 + timedelta(hours=1)
    incidents.mute([cause.id], until=until, actor="carol")
    note(at=T0 + timedelta(minutes=30))
    cause.refresh_from_db()
    assert (cause.status, cause.muted_until, cause.count) == ("muted", until, 2)
    during, after = T0 + timedelta(minutes=59), T0 + timedelta(hours=1, seconds=1)
    assert incidents.effective_status(cause, during) == "muted"
    assert incidents.effective_status(cause, after) == "open"
    assert incidents.open_causes(at=during) == []
    assert incidents.open_causes(at=after) == [cause]
    assert list(incidents.causes().filter(incidents.status_q("muted", during))) == [cause]
    assert not incidents.causes().filter(incidents.status_q("muted", after)).exists()


def test_a_naive_mute_time_is_refused() -> None:
    note()
    with pytest.raises(ValueError, match="aware"):
        incidents.mute([Cause.objects.get().id], until=datetime(2026, 3, 2), actor="x")


def test_open_causes_since_are_those_opened_or_reopened_since() -> None:
    note("A: one", at=T0)
    note("B: two", at=T0 + timedelta(hours=1))
    b = Cause.objects.get(signature="B: two")
    a = Cause.objects.get(signature="A: one")
    incidents.resolve([a.id], actor="x", at=T0 + timedelta(hours=2))
    note("A: one", at=T0 + timedelta(hours=3))
    since = incidents.open_causes(T0 + timedelta(minutes=30))
    assert [(c.signature, c.reopened) for c in since] == [("B: two", False), ("A: one", True)]
    assert [c.id for c in incidents.open_causes()] == [b.id, a.id]


def test_resolved_causes_since() -> None:
    note("A: one")
    note("B: two")
    a = Cause.objects.get(signature="A: one")
    incidents.resolve([a.id], actor="x", at=T0 + timedelta(hours=1))
    assert incidents.resolved_causes(T0 + timedelta(minutes=59)) == [a]
    assert incidents.resolved_causes(T0 + timedelta(hours=2)) == []


@pytest.mark.django_db(transaction=True)
def test_a_note_rolls_back_with_its_transaction() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        incidents.note_failure(connection, "q", SIG, at=T0)
        raise RuntimeError("the row change failed")
    assert not Cause.objects.exists()
