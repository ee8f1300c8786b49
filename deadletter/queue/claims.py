"""What a drain reads to hand a message over: the oldest unclaimed row locked
(`FOR UPDATE SKIP LOCKED`, one raw statement), a row by key, a queue's tail and
row count, a read-only preview, and whether the database can claim rows at all.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator
from datetime import datetime

from django.db import DatabaseError, NotSupportedError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter.conf import conf
from deadletter.models import QueuedMessage, QueuedMessageQuerySet
from deadletter.queue import age
from deadletter.queue.rows import REREAD, OnDrop, Queued, Rereads, process_row, read_row
from deadletter.store import detached, sql
from deadletter.wire import codec, keys
from deadletter.wire.messages import Message

logger = logging.getLogger("deadletter")


@dataclasses.dataclass(frozen=True, slots=True)
class Preview:
    """What a drain would do with one message, read without writing: `verdict` is
    "deliver", "waiting" (a backoff holds it until `due_at`), "expired" or
    "corrupt" (`msg` is None for a corrupt row)."""

    key: bytes
    msg: Message | None
    verdict: str
    due_at: datetime | None = None


def database_vendor() -> str:
    """The vendor of the queue's database ("sqlite", "postgresql", ...)."""
    return sql.connection().vendor


def can_claim_rows() -> bool:
    """Whether the queue's database can lock single rows and skip locked ones,
    which several drains at once need to never hand a message over twice."""
    return sql.can_skip_locked(sql.connection())


def sqlite_file() -> str | None:
    """The file of a SQLite queue database; None for another backend or an in-memory one."""
    connection = sql.connection()
    if connection.vendor != "sqlite":
        return None
    name = str(connection.settings_dict["NAME"])
    if not name or name == ":memory:" or "mode=memory" in name:
        return None
    return name


def tail_key(queue: str) -> bytes | None:
    """The newest key of `queue` now, to bound a drain to the rows that were there
    when it started. What a dead process left in the spool is written first, so
    a drain delivers it even to a queue that had no row."""
    detached.settle(sql.connection())
    return _rows().tail_key(queue)


def count_rows(queue: str, until: bytes | None = None) -> int:
    """How many rows `queue` holds up to and including `until` (a legacy or
    multi-message row counts once): a progress bar's total, not a message count."""
    return _rows().count_rows(queue, until)


def _rows() -> QueuedMessageQuerySet:
    return QueuedMessage.objects.using(conf.DATABASE)


@contextlib.contextmanager
def claiming(
    queue: str,
    *,
    after: bytes | None = None,
    until: bytes | None = None,
    on_drop: OnDrop | None = None,
) -> Iterator[Queued | None]:
    """A transaction holding the oldest unclaimed message of `queue` with a key
    above `after` (and at most `until`), or None when there is none.

    Settle the message (`dequeue`, or `settlements`' `replace_msg`, `rewrite_msg`, `drop_msg`)
    inside the block: the settlement commits with the claim, and a process
    that dies before the end releases the row to the other drains untouched.
    Needs a database that `can_claim_rows`.
    """
    connection = sql.connection()
    with transaction.atomic(using=connection.alias):
        yield claim_failed_msg(queue, after=after, until=until, on_drop=on_drop)


def claim_failed_msg(
    queue: str,
    *,
    after: bytes | None = None,
    until: bytes | None = None,
    on_drop: OnDrop | None = None,
    due_now: bool = False,
) -> Queued | None:
    """Lock the oldest message of `queue` no other transaction holds, with
    `SELECT ... FOR UPDATE SKIP LOCKED`; call it inside a transaction (see
    `claiming`). Rows the rules rewrite or drop on the way are treated as by
    `iter_failed_msgs`, in the same transaction, and told to `on_drop`. With
    `due_now` (the drain), only a row no backoff ever held back.
    """
    connection = sql.connection()
    if not connection.in_atomic_block:
        raise transaction.TransactionManagementError("claim_failed_msg needs a transaction")
    if not sql.can_skip_locked(connection):
        raise NotSupportedError(f"{connection.vendor} cannot skip locked rows")
    low, high = keys.queue_bounds(queue)
    bound, inclusive = after, False
    rereads = Rereads()
    cutoff, max_row_bytes = age.cutoff_ns(queue=queue), conf.MAX_ROW_BYTES
    while True:
        row = _claim_row(connection, low, high, bound, inclusive, until, due_now)
        if row is None:
            return None
        key, value = row
        outcome = read_row(
            connection,
            queue,
            low,
            key,
            value,
            cutoff=cutoff,
            max_row_bytes=max_row_bytes,
            on_drop=on_drop,
        )
        if isinstance(outcome, Queued):
            return outcome
        bound, inclusive = key, outcome is REREAD and rereads.again(key)


def _claim_row(
    connection: BaseDatabaseWrapper,
    low: bytes,
    high: bytes,
    after: bytes | None,
    inclusive: bool,
    until: bytes | None,
    due_now: bool,
) -> tuple[bytes, bytes] | None:
    """`(key, value)` of the oldest row of `[low, high)` from `after` on (included or
    not; the range's start when None), up to `until`, locked for this transaction."""
    if after is None or after < low:
        after, inclusive = low, True
    query = sql.claim_sql(
        connection, sql.table(), inclusive=inclusive, until=until is not None, due_now=due_now
    )
    rows = sql.read(connection, query, (after, high) if until is None else (after, high, until))
    if not rows:
        return None
    key, value = rows[0]
    return bytes(key), bytes(value) if value is not None else b""


def fetch_msg(key: bytes, *, on_drop: OnDrop | None = None) -> Queued | None:
    """The message of the one row `key`, the rules of `iter_failed_msgs` applied
    (a zero `queued_at` stamped, an expired message or a corrupt row dropped, a
    multi-message row split with its first message keeping the key); None when
    there is nothing to hand over. Inside a transaction on a database that
    `can_claim_rows`, the row is locked `FOR UPDATE SKIP LOCKED`, and None also
    means another drain holds it. Never raises for database or data problems.
    """
    key = bytes(key)
    connection = sql.connection()
    lock = connection.in_atomic_block and can_claim_rows()
    name = keys.queue_of(key)
    prefix = keys.prefix_of(key)
    rereads = Rereads()
    while True:
        try:
            row = _rows().locked_row(key, lock=lock)
        except DatabaseError:
            logger.exception("fetch failed key=%s", key.hex())
            return None
        if row is None:
            return None
        outcome = process_row(connection, name, prefix, key, row[1], on_drop=on_drop)
        if isinstance(outcome, Queued):
            return outcome
        if outcome is not REREAD or not rereads.again(key):
            return None


def preview_failed_msgs(queue: str, batch_size: int = 1000) -> Iterator[Preview]:
    """Every message of `queue` oldest first with what a drain would do to it,
    read only: no row is split, stamped or deleted (for `--dry-run`)."""
    low, high = keys.queue_bounds(queue)
    max_age_ns = age.max_age_ns(queue)
    rows = sql.iter_range(sql.connection(), sql.table(), low, high, batch_size)
    for key, value in rows:
        try:
            msgs = codec.decode(value)
        except codec.CodecError:
            yield Preview(key, None, "corrupt")
            continue
        cutoff = age.cutoff_ns(max_age=max_age_ns)
        for msg in msgs:
            yield Preview(key, msg, "expired" if age.expired(msg.queued_at, cutoff) else "deliver")
