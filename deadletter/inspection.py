"""Read-only views of the queue for operators (the admin and the REST API).

Nothing here writes: an operator looking at a queue must not split, stamp
or drop rows as a side effect (that is the drain's job, through `fetch`).
Every read is a range of the primary-key index, so it costs the same at a
thousand rows as at a million.
"""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter import codec, keys, sql
from deadletter.conf import conf
from deadletter.messages import Message
from deadletter.queue import queue_names

__all__ = [
    "Cause",
    "QueueOverview",
    "QueueSummary",
    "Row",
    "causes",
    "causes_by_queue",
    "expired_keys",
    "get_row",
    "overview",
    "page_rows",
    "summarize",
    "summarize_all",
]

MAX_PAGE = 500


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    """One stored row as it is: `messages` is None for a row that does not decode."""

    key: bytes
    messages: list[Message] | None

    @property
    def is_legacy(self) -> bool:
        return keys.is_legacy_key(self.key)


@dataclasses.dataclass(frozen=True, slots=True)
class QueueSummary:
    """A queue at a glance; `oldest_age` (seconds since its oldest message first
    failed) is the standard dead-letter alarm."""

    name: str
    rows: int
    oldest_queued_at: str | None
    oldest_age: float | None


def _cursor() -> tuple[BaseDatabaseWrapper, str]:
    connection = connections[conf.DATABASE]
    return connection, connection.ops.quote_name(sql.TABLE)


def page_rows(queue: str, *, after: bytes | None = None, limit: int = 50) -> list[Row]:
    """Up to `limit` rows of `queue` in key order (oldest first), after key `after`."""
    if not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be between 1 and {MAX_PAGE}, got {limit}")
    low, high = keys.queue_bounds(queue)
    if after is not None and not low <= after < high:
        raise ValueError("the 'after' key does not belong to this queue")
    connection = connections[conf.DATABASE]
    query = sql.range_sql(connection, sql.TABLE, after is None, limit)
    with connection.cursor() as cursor:
        cursor.execute(query, (low if after is None else after, high))
        return [_row(bytes(k), v) for k, v in cursor.fetchall()]


def get_row(key: bytes) -> Row | None:
    connection, table = _cursor()
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT key, value FROM {table} WHERE key = %s", (bytes(key),))
        found = cursor.fetchone()
    return _row(bytes(found[0]), found[1]) if found else None


def summarize(queue: str, *, now_ns: int | None = None) -> QueueSummary:
    """Row count and the age of the oldest message: one COUNT and one seek."""
    low, high = keys.queue_bounds(queue)
    connection, table = _cursor()
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {table} WHERE key >= %s AND key < %s", (low, high))
        rows = int(cursor.fetchone()[0])
    oldest = None
    for row in page_rows(queue, limit=MAX_PAGE):
        if row.messages:
            stamped = [m.queued_at for m in row.messages if m.queued_at is not None]
            if stamped:
                oldest = min(stamped)
                break
    if oldest is None:
        return QueueSummary(queue, rows, None, None)
    now = time.time_ns() if now_ns is None else now_ns
    return QueueSummary(queue, rows, oldest.format(), (now - oldest.unix_ns) / 1e9)


def summarize_all(*, now_ns: int | None = None) -> list[QueueSummary]:
    return [summarize(name, now_ns=now_ns) for name in queue_names()]


def _row(key: bytes, value: bytes | memoryview | None) -> Row:
    try:
        return Row(key, codec.decode(bytes(value or b"")))
    except codec.CodecError:
        return Row(key, None)


# --- the admin's queue overview --------------------------------------------------

COUNT_CAP = 100_000
HEAD_ROWS = 20


@dataclasses.dataclass(frozen=True, slots=True)
class Cause:
    """Rows of one queue (or all, `queue` None) whose last failure has this signature."""

    signature: str
    rows: int
    queue: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class QueueOverview:
    """One queue as an operator sees it: every figure is a bounded index read.

    `depth` is exact up to `COUNT_CAP` rows (`depth_capped` says when it is
    more). `expiring` counts rows parked so long ago that the age limit drops
    them within the window: the key's time bounds the first failure from
    above, so it is exact for messages parked once, and a partly delivered
    remainder (parked again with its older first failure) may expire sooner.
    """

    name: str
    depth: int
    depth_capped: bool
    oldest_enqueued: datetime | None
    oldest_failure: datetime | None
    expiring: int
    expired: int
    legacy_rows: int
    causes: list[Cause]


def _capped_count(cursor: Any, table: str, low: bytes, high: bytes, cap: int) -> int:
    cursor.execute(
        f"SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE key >= %s AND key < %s "
        f"LIMIT {int(cap) + 1}) AS capped",
        (low, high),
    )
    return int(cursor.fetchone()[0])


def _prefix_sql(vendor: str) -> str:
    """SQL for the queue-name part of `key` (everything before the first NUL)."""
    if vendor == "postgresql":
        return "substring(key from 1 for position('\\x00'::bytea in key) - 1)"
    return "substr(key, 1, instr(key, X'00') - 1)"


def causes(queue: str | None = None) -> list[Cause]:
    """Failure signatures with their row counts, most rows first; one read of the
    (signature, key) index, linear in the rows that recorded a failure."""
    connection, table = _cursor()
    with connection.cursor() as cursor:
        if queue is None:
            cursor.execute(
                f"SELECT signature, COUNT(*) FROM {table} WHERE signature IS NOT NULL "
                "GROUP BY signature ORDER BY COUNT(*) DESC, signature"
            )
            return [Cause(sig, int(n)) for sig, n in cursor.fetchall()]
        low, high = keys.message_bounds(queue)
        cursor.execute(
            f"SELECT signature, COUNT(*) FROM {table} WHERE signature IS NOT NULL "
            "AND key >= %s AND key < %s GROUP BY signature ORDER BY COUNT(*) DESC, signature",
            (low, high),
        )
        return [Cause(sig, int(n), queue) for sig, n in cursor.fetchall()]


def causes_by_queue() -> dict[str, list[Cause]]:
    """Every queue's failure signatures in one read of the (signature, key) index."""
    connection, table = _cursor()
    prefix = _prefix_sql(connection.vendor)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {prefix} AS q, signature, COUNT(*) FROM {table} "
            "WHERE signature IS NOT NULL GROUP BY q, signature"
        )
        found = cursor.fetchall()
    grouped: dict[str, list[Cause]] = {}
    for raw, sig, n in found:
        name = bytes(raw).decode("utf-8", errors="replace")
        grouped.setdefault(name, []).append(Cause(sig, int(n), name))
    for listed in grouped.values():
        listed.sort(key=lambda c: (-c.rows, c.signature))
    return grouped


def overview(
    *, now: datetime | None = None, window: timedelta = timedelta(hours=24)
) -> list[QueueOverview]:
    """Every queue at a glance, oldest first within each; a few index reads a queue."""
    now = now or datetime.now(UTC)
    max_age = conf.MAX_QUEUE_AGE
    expired_before = _ns(now - max_age)
    expiring_before = _ns(now + window - max_age)
    by_queue = causes_by_queue()
    connection, table = _cursor()
    found = []
    with connection.cursor() as cursor:
        for name in queue_names():
            low, high = keys.queue_bounds(name)
            depth = _capped_count(cursor, table, low, high, COUNT_CAP)
            prefix = keys.encode_queue_name(name)
            cursor.execute(f"SELECT COUNT(*) FROM {table} WHERE key = %s", (prefix,))
            legacy_rows = int(cursor.fetchone()[0])
            head = page_rows(name, limit=HEAD_ROWS)
            enqueued = next((keys.written_at(r.key) for r in head if not r.is_legacy), None)
            failures = [
                m.queued_at
                for r in head
                for m in r.messages or []
                if isinstance(m.queued_at, datetime)
            ]
            found.append(
                QueueOverview(
                    name=name,
                    depth=min(depth, COUNT_CAP),
                    depth_capped=depth > COUNT_CAP,
                    oldest_enqueued=enqueued,
                    oldest_failure=min(failures) if failures else None,
                    expiring=_count_before(cursor, table, prefix, expiring_before),
                    expired=_count_before(cursor, table, prefix, expired_before),
                    legacy_rows=legacy_rows,
                    causes=by_queue.get(name, []),
                )
            )
    return found


def expired_keys(queue: str, *, after: bytes | None = None, limit: int = 500) -> list[bytes]:
    """Keys of `queue` parked before the age limit's cutoff (their messages have
    expired), in key order after `after`: what "purge expired" hands to fetch."""
    cutoff = _ns(datetime.now(UTC) - conf.MAX_QUEUE_AGE)
    prefix = keys.encode_queue_name(queue)
    low = after if after is not None else prefix + keys.SEPARATOR
    high = keys.make_key(prefix, cutoff, 0)
    connection, table = _cursor()
    op = ">" if after is not None else ">="
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT key FROM {table} WHERE key {op} %s AND key < %s "
            f"ORDER BY key LIMIT {int(limit)}",
            (low, high),
        )
        return [bytes(k) for (k,) in cursor.fetchall()]


def _count_before(cursor: Any, table: str, prefix: bytes, before_ns: int) -> int:
    if before_ns <= 0:
        return 0
    low = prefix + keys.SEPARATOR
    high = keys.make_key(prefix, min(before_ns, (1 << 64) - 1), 0)
    return min(_capped_count(cursor, table, low, high, COUNT_CAP), COUNT_CAP)


def _ns(when: datetime) -> int:
    return max(0, int(when.timestamp()) * 1_000_000_000 + when.microsecond * 1000)
