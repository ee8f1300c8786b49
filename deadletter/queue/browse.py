"""Read-only views of stored rows for operators (the admin, the REST API, the dump).

Nothing here writes: an operator looking at a queue must not split, stamp
or drop rows as a side effect (that is the drain's job, through `fetch`).
Every read is a range of the primary-key index, so it costs the same at a
thousand rows as at a million.
"""

from __future__ import annotations

import dataclasses

from deadletter.conf import conf
from deadletter.queue import age
from deadletter.store import sql
from deadletter.wire import codec, keys
from deadletter.wire.messages import Message

__all__ = ["MAX_PAGE", "Row", "expired_keys", "get_row", "is_too_large", "page_rows", "rows_of"]

MAX_PAGE = 500


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    """One stored row as it is: `messages` is None for a row that does not decode
    and for one over `DEADLETTER_MAX_ROW_BYTES` (`too_large`), which is never decoded."""

    key: bytes
    messages: list[Message] | None
    size: int = 0
    too_large: bool = False

    @property
    def is_legacy(self) -> bool:
        return keys.is_legacy_key(self.key)


def page_rows(queue: str, *, after: bytes | None = None, limit: int = 50) -> list[Row]:
    """Up to `limit` rows of `queue` in key order (oldest first), after key `after`."""
    if not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be between 1 and {MAX_PAGE}, got {limit}")
    low, high = keys.queue_bounds(queue)
    if after is not None and not low <= after < high:
        raise ValueError("the 'after' key does not belong to this queue")
    connection = sql.connection()
    query = sql.range_sql(connection, sql.table(), after is None, limit)
    with connection.cursor() as cursor:
        cursor.execute(query, (low if after is None else after, high))
        return [_row(bytes(k), v) for k, v in cursor.fetchall()]


def get_row(key: bytes) -> Row | None:
    connection = sql.connection()
    with connection.cursor() as cursor:
        cursor.execute(
            sql.statement(connection, "SELECT {key}, value FROM {table} WHERE {key} = %s"),
            (bytes(key),),
        )
        found = cursor.fetchone()
    return _row(bytes(found[0]), found[1]) if found else None


def rows_of(row_keys: list[bytes]) -> list[Row]:
    """The rows of `row_keys` that are still there, in that order, in one statement
    (a page of search results)."""
    if not row_keys:
        return []
    connection = sql.connection()
    marks = ", ".join(["%s"] * len(row_keys))
    with connection.cursor() as cursor:
        cursor.execute(
            sql.statement(
                connection, "SELECT {key}, value FROM {table} WHERE {key} IN ({marks})", marks=marks
            ),
            [bytes(k) for k in row_keys],
        )
        found = {bytes(k): v for k, v in cursor.fetchall()}
    return [_row(k, found[k]) for k in map(bytes, row_keys) if k in found]


def code_name(code: object) -> str | None:
    """The name the project gives an event code (`DEADLETTER_EVENT_CODES`); None
    for a code it does not name, which the admin and the API show as its number."""
    names = conf.EVENT_CODES
    try:
        return names.get(int(code)) if isinstance(names, dict) else None  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None


def is_too_large(key: bytes, size: int) -> bool:
    """Whether a row is over `DEADLETTER_MAX_ROW_BYTES`: a message row (legacy
    aggregates are split a message at a time, whatever their size)."""
    return keys.NUL in key and size > conf.MAX_ROW_BYTES


def _row(key: bytes, value: bytes | memoryview | None) -> Row:
    data = bytes(value or b"")
    if is_too_large(key, len(data)):
        return Row(key, None, len(data), too_large=True)
    try:
        return Row(key, codec.decode(data), len(data))
    except codec.CodecError:
        return Row(key, None, len(data))


def expired_keys(queue: str, *, after: bytes | None = None, limit: int = 500) -> list[bytes]:
    """Keys of `queue` parked before the age limit's cutoff (their messages have
    expired), in key order after `after`: what "purge expired" hands to fetch."""
    cutoff = max(0, age.cutoff_ns(queue=queue))
    prefix = keys.encode_queue_name(queue)
    low = after if after is not None else prefix + keys.SEPARATOR
    high = keys.make_key(prefix, cutoff, 0)
    connection = sql.connection()
    query = sql.statement(
        connection,
        "SELECT {key} FROM {table} WHERE {key} {op} %s AND {key} < %s ORDER BY {key} LIMIT {n}",
        op=">" if after is not None else ">=",
        n=int(limit),
    )
    with connection.cursor() as cursor:
        cursor.execute(query, (low, high))
        return [bytes(k) for (k,) in cursor.fetchall()]
