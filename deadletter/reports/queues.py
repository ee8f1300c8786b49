"""Queue names a page at a time, and figures over every queue from one aggregate
statement each: what keeps the overview, the stats, the metrics and the API's
queue list bounded however many queue names clients have made.

A page walks the primary-key index (it starts with the queue name) one seek a
queue, so a page of `n` queues costs `n + 1` seeks whatever the number of
queues; the totals are a count of the table, a count of the (due_at, key)
index and a sum of the drop counters, never a Python object per queue.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter.conf import conf
from deadletter.models import DROP_TABLE
from deadletter.store import sql
from deadletter.store.counters import DROP_REASONS, drop_counts
from deadletter.wire import keys

__all__ = [
    "QueuePage",
    "Totals",
    "holds_a_row",
    "is_known_queue",
    "page_after",
    "page_before",
    "totals",
    "unknown_queue_message",
]


@dataclasses.dataclass(frozen=True, slots=True)
class QueuePage:
    """Queue names in key order; `more_before` / `more_after` say whether a page lies
    either side."""

    names: list[str]
    more_before: bool
    more_after: bool


@dataclasses.dataclass(frozen=True, slots=True)
class Totals:
    """Every queue together, exact: rows, messages a backoff holds back, drops by reason."""

    rows: int
    waiting: int
    dropped: dict[str, int]


def _walk_sql(connection: BaseDatabaseWrapper, descending: bool, limit: int) -> str:
    """A loose index scan as a recursive query, from a bound given as the parameter:
    each step one seek to the next queue's first key (`descending`: the previous
    queue's last key), at most `limit` steps. The step's bound is the queue's
    range end `name 0x01` (descending: its start, `name`), cut from the key by
    the vendor's byte functions as `store.scans` cuts it."""
    key = sql.key_column(connection)
    table = sql.quoted(connection, sql.table())
    vendor = connection.vendor
    if vendor == "postgresql":
        nul = "position('\\x00'::bytea IN h.k)"
        name = f"(CASE WHEN {nul} > 0 THEN substring(h.k FROM 1 FOR {nul} - 1) ELSE h.k END)"
        after = f"{name} || '\\x01'::bytea"
    elif vendor == "mysql":
        nul = "LOCATE(X'00', h.k)"
        name = f"(CASE WHEN {nul} > 0 THEN SUBSTRING(h.k, 1, {nul} - 1) ELSE h.k END)"
        after = f"CONCAT({name}, X'01')"
    else:
        nul = "instr(h.k, X'00')"
        name = f"CAST((CASE WHEN {nul} > 0 THEN substr(h.k, 1, {nul} - 1) ELSE h.k END) AS BLOB)"
        after = f"CAST({name} || X'01' AS BLOB)"
    if descending:
        first = f"SELECT {key} FROM {table} WHERE {key} < %s ORDER BY {key} DESC LIMIT 1"
        step = f"SELECT {key} FROM {table} WHERE {key} < {name} ORDER BY {key} DESC LIMIT 1"
    else:
        first = f"SELECT {key} FROM {table} WHERE {key} >= %s ORDER BY {key} LIMIT 1"
        step = f"SELECT {key} FROM {table} WHERE {key} >= {after} ORDER BY {key} LIMIT 1"
    return (
        f"WITH RECURSIVE h(k, n) AS (SELECT ({first}), 1 "
        f"UNION ALL SELECT ({step}), h.n + 1 FROM h WHERE h.k IS NOT NULL AND h.n < {int(limit)}) "
        "SELECT k FROM h WHERE k IS NOT NULL"
    )


def _walk(start: bytes, *, descending: bool, limit: int) -> list[bytes]:
    """The encoded names of up to `limit` queues from `start` on: one statement."""
    connection = sql.connection()
    found = sql.read(connection, _walk_sql(connection, descending, limit), (start,))
    return [keys.prefix_of(bytes(k)) for (k,) in found]


def page_after(after: str | None, limit: int) -> QueuePage:
    """The first `limit` queues holding a row whose name sorts after `after` (from the
    first queue when None): two statements of `limit + 1` seeks in all. `ValueError`
    for an invalid name."""
    start = b"" if after is None else keys.encode_queue_name(after) + b"\x01"
    found = _walk(start, descending=False, limit=limit + 1)
    more_before = after is not None and bool(
        _walk(keys.encode_queue_name(after), descending=True, limit=1)
    )
    return QueuePage(_names(found[:limit]), more_before, len(found) > limit)


def page_before(before: str, limit: int) -> QueuePage:
    """The last `limit` queues holding a row whose name sorts before `before`, in key
    order: two statements. `ValueError` for an invalid name."""
    end = keys.encode_queue_name(before)
    found = _walk(end, descending=True, limit=limit + 1)
    found.reverse()
    more_after = bool(_walk(end, descending=False, limit=1))
    return QueuePage(_names(found[-limit:]), len(found) > limit, more_after)


def _names(prefixes: list[bytes]) -> list[str]:
    return [p.decode("utf-8", errors="replace") for p in prefixes]


def totals(now: datetime) -> Totals:
    """Rows, waiting messages and drops over every queue: three aggregate statements."""
    connection = sql.connection()
    ((rows,),) = sql.read(connection, sql.statement(connection, "SELECT COUNT(*) FROM {table}"), ())
    waiting_sql = sql.statement(
        connection, "SELECT COUNT(*) FROM {table}{by_due} WHERE due_at > %s"
    )
    ((waiting,),) = sql.read(
        connection, waiting_sql, (connection.ops.adapt_datetimefield_value(now),)
    )
    drop_sql = sql.statement(
        connection, "SELECT reason, SUM(count) FROM {table} GROUP BY reason", table=DROP_TABLE
    )
    dropped = dict.fromkeys(DROP_REASONS, 0)
    for reason, count in sql.read(connection, drop_sql, ()):
        dropped[reason] = int(count or 0)
    return Totals(int(rows), int(waiting), dropped)


def is_known_queue(name: str) -> bool:
    """Whether `name` is a queue an operator can ask about: it holds a row, has a
    handler in `DEADLETTER_HANDLERS` or has dropped a message. `ValueError` for
    an invalid name."""
    keys.encode_queue_name(name)
    if name in conf.HANDLERS or holds_a_row(name):
        return True
    return bool(drop_counts(sql.connection(), [name]))


def holds_a_row(name: str) -> bool:
    """Whether queue `name` holds a row (a message or a legacy aggregate): one seek."""
    low, high = keys.queue_bounds(name)
    connection = sql.connection()
    query = sql.statement(
        connection, "SELECT 1 FROM {table} WHERE {key} >= %s AND {key} < %s LIMIT 1"
    )
    return bool(sql.read(connection, query, (low, high)))


def unknown_queue_message(name: str) -> str:
    """The one line a command prints for a queue it does not know."""
    return (
        f"no queue {name!r}: it holds no message, has dropped none and has no handler "
        "in DEADLETTER_HANDLERS"
    )
