from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator

import pytest
from django.db import connection, connections

from deadletter.models import QueuedMessage
from deadletter.queue import (
    QueueingError,
    fetch_failed_msgs,
    iter_failed_msgs,
    legacy,
    store_failed_msgs,
)
from deadletter.store import scans, sql
from deadletter.wire import codec, keys
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message

TABLE = QueuedMessage._meta.db_table

pytestmark = pytest.mark.django_db(transaction=True)

STAMPED = GoTime.parse("2026-11-29T12:00:00Z")


def aggregate(*subjects: str) -> bytes:
    return codec.encode([Message(subject=s, queued_at=STAMPED) for s in subjects])


def test_aggregate_rows_keep_list_order_just_below_the_top() -> None:
    rows = list(
        legacy.legacy_message_rows(
            b"q", aggregate("a", "b", "c"), count=3, top_ns=1_000, seq=7, now_ns=2_000
        )
    )
    assert [keys.parse_key(k) for k, _ in rows] == [("q", 997, 7), ("q", 998, 7), ("q", 999, 7)]
    assert [codec.decode(v)[0].subject for _, v in rows] == ["a", "b", "c"]


def test_zero_queued_at_is_stamped_with_the_split_time() -> None:
    blob = codec.encode([Message(subject="never stamped")])
    ((_, value),) = legacy.legacy_message_rows(b"q", blob, count=1, top_ns=10, seq=1, now_ns=5)
    assert codec.decode(value)[0].queued_at == GoTime(5)


def test_queue_heads_find_every_queue_and_its_legacy_row() -> None:
    QueuedMessage.objects.create(key=b"b", value=aggregate("x"))
    for name in ("a", "b", "c"):
        QueuedMessage.objects.create(key=keys.new_key(name), value=aggregate(name))
    heads = list(scans.queue_heads(connection, TABLE))
    assert [keys.queue_of(h) for h in heads] == ["a", "b", "c"]
    assert heads[1] == b"b"


def test_fold_then_split_gives_back_the_same_messages_in_order() -> None:
    for subject in ("one", "two", "three"):
        QueuedMessage.objects.create(key=keys.new_key("q"), value=aggregate(subject))
    assert legacy.fold_queue_rows(connection, TABLE, b"q") == 3
    assert list(QueuedMessage.objects.values_list("key", flat=True)) == [b"q"]
    assert legacy.split_legacy_rows(connection, TABLE) == (1, 3)
    values = QueuedMessage.objects.order_by("key").values_list("value", flat=True)
    assert [codec.decode(bytes(v))[0].subject for v in values] == ["one", "two", "three"]


def cut_short_after(*subjects: str) -> bytes:
    """An aggregate whose head promises one message more than it holds whole."""
    blob = aggregate(*subjects)
    return bytes([blob[0] + 1]) + blob[1:] + b"\xa1"


def test_a_message_that_does_not_decode_rolls_back_the_whole_split() -> None:
    QueuedMessage.objects.create(key=b"q", value=cut_short_after("a", "b"))
    with pytest.raises(codec.CodecError):
        legacy.split_legacy_row(connection, TABLE, b"q", cut_short_after("a", "b"), now_ns=10**18)
    assert list(QueuedMessage.objects.values_list("key", flat=True)) == [b"q"]


def test_a_corrupt_message_after_several_batches_removes_the_rows_already_stored() -> None:
    blob = cut_short_after(*(f"m{i}" for i in range(2_500)))
    QueuedMessage.objects.create(key=b"q", value=blob)
    with pytest.raises(codec.CodecError):
        legacy.split_legacy_row(connection, TABLE, b"q", blob, now_ns=10**18)
    assert list(QueuedMessage.objects.values_list("key", flat=True)) == [b"q"]


def table() -> list[tuple[bytes, bytes]]:
    return sorted(
        (bytes(k), bytes(v)) for k, v in QueuedMessage.objects.values_list("key", "value")
    )


def stored_by_an_earlier_attempt(blob: bytes, top_ns: int, upto: int) -> None:
    """What a split killed after its first batches left: message i at (top - n + i, seq ^ i)."""
    count = codec.count_messages(blob)
    seq = legacy.split_seq(b"q", blob)
    for i, message in enumerate(codec.decode(blob)[:upto]):
        QueuedMessage.objects.create(
            key=keys.make_key("q", top_ns - count + i, seq ^ i), value=codec.encode_one(message)
        )


# A crash leaves the aggregate beside the whole batches committed before it: some of
# them, or all (killed between the last batch and the aggregate's own delete).
@pytest.mark.parametrize("upto", [1_000, 2_500], ids=["some batches", "every batch"])
def test_a_split_restarted_after_a_crash_stores_each_message_once_in_order(upto: int) -> None:
    subjects = [f"m{i}" for i in range(2_500)]
    blob = aggregate(*subjects)
    newer = keys.make_key("q", 10**18, 1)
    QueuedMessage.objects.create(key=newer, value=aggregate("newer"))
    QueuedMessage.objects.create(key=b"q", value=blob)
    stored_by_an_earlier_attempt(blob, top_ns=10**18, upto=upto)
    earlier = table()[1 : upto + 1]  # after the aggregate, which sorts first
    legacy.split_legacy_row(connection, TABLE, b"q", blob, now_ns=2 * 10**18)
    found = table()
    assert [codec.decode(v)[0].subject for _, v in found] == [*subjects, "newer"]
    assert found[:upto] == earlier
    assert found[-1][0] == newer


def test_a_restart_finds_the_earlier_attempts_keys_whatever_the_clock_says() -> None:
    blob = aggregate(*(f"m{i}" for i in range(1_500)))
    QueuedMessage.objects.create(key=b"q", value=blob)
    # The first attempt ran at time 5e17 into an otherwise empty queue.
    stored_by_an_earlier_attempt(blob, top_ns=5 * 10**17, upto=1_000)
    legacy.split_legacy_row(connection, TABLE, b"q", blob, now_ns=9 * 10**17)
    found = table()
    assert len(found) == 1_500
    assert {keys.parse_key(k).time_ns for k, _ in found} == set(
        range(5 * 10**17 - 1_500, 5 * 10**17)
    )


def test_a_split_that_lost_the_race_writes_nothing() -> None:
    blob = aggregate("a", "b")
    QueuedMessage.objects.create(key=b"q", value=blob)
    legacy.split_legacy_row(connection, TABLE, b"q", blob, now_ns=10**18)
    before = table()
    with pytest.raises(sql.Conflict):
        legacy.split_legacy_row(connection, TABLE, b"q", blob, now_ns=10**18)
    assert table() == before


# --- parking never waits on a long split ----------------------------------------

LARGE = 60_000  # one transaction for all of it holds the write lock well over a second


@dataclasses.dataclass
class Parked:
    stored: int = 0
    failed: list[QueueingError] = dataclasses.field(default_factory=list)


@contextlib.contextmanager
def parking_continuously(queue: str = "parked") -> Iterator[Parked]:
    """Park a message every few ms from another thread (its own connection) meanwhile.

    The parker waits at most 1 s for a lock (SQLite's busy timeout, PostgreSQL's
    lock_timeout, InnoDB's lock wait timeout), not the 30 s of the settings: a job
    that held the write lock for longer would make a store fail here (the old single
    transaction, held for the seconds the whole job takes, did), while one batch
    (tens of ms) leaves room for a loaded machine.
    """
    parked = Parked()
    stop = threading.Event()

    def park() -> None:
        own = connections["default"]
        try:
            with own.cursor() as cursor:
                if own.vendor == "sqlite":
                    cursor.execute("PRAGMA busy_timeout = 1000")
                elif own.vendor == "mysql":
                    cursor.execute("SET SESSION innodb_lock_wait_timeout = 1")
                else:
                    cursor.execute("SET lock_timeout = '1s'")
            while not stop.is_set() or parked.stored < 3:
                try:
                    store_failed_msgs(queue, Message(subject=f"parked {parked.stored}"))
                    parked.stored += 1
                except QueueingError as exc:
                    parked.failed.append(exc)
                stop.wait(0.005)
        finally:
            own.close()

    thread = threading.Thread(target=park)
    thread.start()
    try:
        yield parked
    finally:
        stop.set()
        thread.join()


@pytest.mark.slow
@pytest.mark.parametrize("by", ["fetch", "migration"])
def test_every_store_succeeds_while_a_large_aggregate_is_split(by: str) -> None:
    blob = aggregate(*(f"m{i}" for i in range(LARGE)))
    QueuedMessage.objects.create(key=b"q", value=blob)
    with parking_continuously() as parked:
        if by == "fetch":
            assert next(iter_failed_msgs("q")).msg.subject == "m0"
        else:
            assert legacy.split_legacy_rows(connection, TABLE) == (1, LARGE)
    assert parked.failed == []
    assert QueuedMessage.objects.count() == LARGE + parked.stored
    assert len(fetch_failed_msgs("parked")) == parked.stored
