"""Queue names a page at a time, and figures over every queue from one aggregate
statement each: what keeps the overview, the stats, the metrics and the API's
queue list bounded however many queue names clients have made.

A page walks the primary-key index (it starts with the queue name) one seek a
queue (`queue.api.walk_queue_names`), so a page of `n` queues costs `n + 1`
seeks whatever the number of queues; the totals are a count of the table, a
count of the (due_at, key) index and a sum of the drop counters, never a
Python object per queue.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from deadletter.models import DROP_TABLE
from deadletter.queue.api import walk_queue_names
from deadletter.queue.config import queue_config
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


def page_after(after: str | None, limit: int) -> QueuePage:
    """The first `limit` queues holding a row whose name sorts after `after` (from the
    first queue when None): two statements of `limit + 1` seeks in all. `ValueError`
    for an invalid name."""
    found = walk_queue_names(after, limit + 1)
    more_before = after is not None and bool(walk_queue_names(after, 1, descending=True))
    return QueuePage(found[:limit], more_before, len(found) > limit)


def page_before(before: str, limit: int) -> QueuePage:
    """The last `limit` queues holding a row whose name sorts before `before`, in name
    order: two statements. `ValueError` for an invalid name."""
    found = walk_queue_names(before, limit + 1, descending=True)
    found.reverse()
    more_after = bool(walk_queue_names(before, 1, include_start=True))
    return QueuePage(found[-limit:], len(found) > limit, more_after)


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
    if queue_config(name) is not None or holds_a_row(name):
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
