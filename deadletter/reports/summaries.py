"""Every queue at a glance for the REST API: depth, head and the age of the head.

Depths are counts of key ranges of the primary-key index, never decoded
rows; only each queue's head row is decoded, for the time its message first
failed. On SQLite the counts are arranged so a million rows answer in tens of
milliseconds: SQLite counts a whole table from its b-tree pages without
reading each entry (a few ms a million with the pages cached), and a
one-sided range `key >= x` without comparing each key, while a two-sided
range compares every key (about three times the one-sided cost). So small
queues are counted exactly by a bounded probe; the first big queue's depth
is the table's count less every other queue's, and the last two big queues
are counted one-sided to the table's end, less what follows them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from datetime import UTC, datetime
from typing import Any

from django.db import DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter.queue.legacy import iter_queue_heads
from deadletter.store import sql
from deadletter.wire import codec, keys

__all__ = ["QueueStatus", "queue_status", "queue_statuses"]

# A queue with at most this many rows is counted exactly by its probe.
PROBE_ROWS = 5000
# A head row larger than this is not decoded for its first-failure time.
HEAD_DECODE_LIMIT = 1 << 20


@dataclasses.dataclass(frozen=True, slots=True)
class QueueStatus:
    """One queue: `depth` rows; `oldest_enqueued_ns` from the head's key (None when
    the head is a legacy aggregate); `oldest_queued_at` is the first failure of the
    head message (None when it does not decode or is unstamped)."""

    name: str
    depth: int
    oldest_enqueued_ns: int | None
    oldest_queued_at: Any  # an aware datetime with `.format()` (GoTime)

    def oldest_age_seconds(self, now_ns: int | None = None) -> float | None:
        """Seconds since the head message first failed (since it was parked when
        that is unknown): the standard dead-letter alarm."""
        now = time.time_ns() if now_ns is None else now_ns
        if self.oldest_queued_at is not None:
            return (now - epoch_ns(self.oldest_queued_at)) / 1e9
        if self.oldest_enqueued_ns is not None:
            return (now - self.oldest_enqueued_ns) / 1e9
        return None


def epoch_ns(moment: Any) -> int:
    """Nanoseconds since the Unix epoch of a message time (GoTime or aware datetime)."""
    unix_ns = getattr(moment, "unix_ns", None)
    if isinstance(unix_ns, int):
        return unix_ns
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def queue_statuses() -> list[QueueStatus]:
    """Every queue that holds a row, in key order. Raises `DatabaseError`."""
    connection = sql.connection()
    with _snapshot(connection):
        prefixes = [
            head.partition(keys.SEPARATOR)[0] for head in iter_queue_heads(connection, sql.TABLE)
        ]
        depths = _depths(connection, prefixes)
        return [_status(connection, p, d) for p, d in zip(prefixes, depths, strict=True)]


def queue_status(name: str) -> QueueStatus:
    """One queue (depth 0 when it holds nothing); `ValueError` for an invalid name."""
    prefix = keys.encode_queue_name(name)
    connection = sql.connection()
    with _snapshot(connection):
        return _status(connection, prefix, _count(connection, prefix, prefix + b"\x01"))


class _snapshot:
    """One read transaction around the counts on SQLite, so that the table's count
    and the ranges' counts see the same rows (WAL readers never block writers).
    Inside a caller's transaction the caller's snapshot is used as it is."""

    def __init__(self, connection: BaseDatabaseWrapper) -> None:
        self.connection = connection
        self.began = False

    def __enter__(self) -> None:
        c = self.connection
        if c.vendor == "sqlite" and not c.in_atomic_block:
            c.ensure_connection()
            if not c.connection.in_transaction:
                c.connection.execute("BEGIN DEFERRED")
                self.began = True

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if not self.began:
            return
        if exc_type is None:
            self.connection.connection.execute("COMMIT")
        else:
            with contextlib.suppress(Exception):
                self.connection.connection.execute("ROLLBACK")


def _count(connection: BaseDatabaseWrapper, low: bytes, high: bytes | None) -> int:
    table = sql.quoted(connection, sql.TABLE)
    if high is None:
        rows = sql.read(connection, f"SELECT COUNT(*) FROM {table} WHERE key >= %s", (low,))
    else:
        rows = sql.read(
            connection, f"SELECT COUNT(*) FROM {table} WHERE key >= %s AND key < %s", (low, high)
        )
    return int(rows[0][0])


def _depths(connection: BaseDatabaseWrapper, prefixes: list[bytes]) -> list[int]:
    """The row count of each queue (`prefixes` in key order, disjoint ranges)."""
    if connection.vendor != "sqlite":
        return [_count(connection, p, p + b"\x01") for p in prefixes]
    table = sql.quoted(connection, sql.TABLE)
    probe = (
        f"SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE key >= %s AND key < %s "
        f"LIMIT {PROBE_ROWS + 1})"
    )
    depths = [int(sql.read(connection, probe, (p, p + b"\x01"))[0][0]) for p in prefixes]
    big = [i for i, depth in enumerate(depths) if depth > PROBE_ROWS]
    if not big:
        return depths
    # The first big queue is the table's count less every other queue; the last two
    # are counted one-sided from their start to the table's end (less what follows
    # them); any others, two-sided.
    derived, suffixed = big[0], big[1:][-2:]
    for i in big[1:]:
        if i not in suffixed:
            depths[i] = _count(connection, prefixes[i], prefixes[i] + b"\x01")
    for i in reversed(suffixed):
        depths[i] = _count(connection, prefixes[i], None) - sum(depths[i + 1 :])
    total = int(sql.read(connection, f"SELECT COUNT(*) FROM {table}", ())[0][0])
    depths[derived] = max(0, total - sum(d for i, d in enumerate(depths) if i != derived))
    return depths


def _status(connection: BaseDatabaseWrapper, prefix: bytes, depth: int) -> QueueStatus:
    name = prefix.decode("utf-8", errors="replace")
    table = sql.quoted(connection, sql.TABLE)
    head = sql.read(
        connection,
        f"SELECT key, value FROM {table} WHERE key >= %s AND key < %s ORDER BY key LIMIT 1",
        (prefix + keys.SEPARATOR, prefix + b"\x01"),
    )
    if not head:
        return QueueStatus(name, depth, None, None)
    key, value = bytes(head[0][0]), head[0][1]
    try:
        enqueued: int | None = keys.parse_key(key).time_ns
    except ValueError:
        enqueued = None
    return QueueStatus(name, depth, enqueued, _first_failure(value))


def _first_failure(value: Any) -> Any:
    """The earliest `queued_at` of a head row's messages; None if it does not decode."""
    raw = bytes(value or b"")
    if len(raw) > HEAD_DECODE_LIMIT:
        return None
    try:
        msgs = codec.decode(raw)
    except (codec.CodecError, DatabaseError):
        return None
    stamped = [m.queued_at for m in msgs if m.queued_at is not None]
    return min(stamped, key=epoch_ns) if stamped else None
