"""Read-only views of the queue for operators (the admin and the REST API).

Nothing here writes: an operator looking at a queue must not split, stamp
or drop rows as a side effect (that is the drain's job, through `fetch`).
Every read is a range of the primary-key index, so it costs the same at a
thousand rows as at a million.
"""

from __future__ import annotations

import dataclasses
import time

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter import codec, keys, sql
from deadletter.conf import conf
from deadletter.messages import Message
from deadletter.queue import queue_names

__all__ = ["QueueSummary", "Row", "get_row", "page_rows", "summarize", "summarize_all"]

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
