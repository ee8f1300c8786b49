"""The drop counters' statements: how many messages each queue lost and why
(the tables, `DropCount` and `ExpiryWarning`, are in `models/counters.py`).

Below `queue/` (which records a drop in the transaction that deletes the row)
and above nothing but Django's connection: plain upserts, no queue rules.
"""

from __future__ import annotations

from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter.models import DROP_TABLE, WARNING_TABLE
from deadletter.store import sql

__all__ = ["DROP_REASONS", "WARNING_TABLE", "drop_counts", "record_drop"]

DROP_REASONS = ("expired", "corrupt", "permanent", "max_attempts")


def record_drop(connection: BaseDatabaseWrapper, queue: str, reason: str, n: int = 1) -> None:
    """Add `n` to the drop counter of (`queue`, `reason`); call it inside the
    transaction that deletes the rows, so the count commits or rolls back with them."""
    if n <= 0:
        return
    if reason not in DROP_REASONS:
        raise ValueError(f"unknown drop reason {reason!r}; known: {', '.join(DROP_REASONS)}")
    if connection.vendor == "mysql":
        add = "ON DUPLICATE KEY UPDATE count = count + VALUES(count)"
    else:
        add = "ON CONFLICT (queue, reason) DO UPDATE SET count = {table}.count + excluded.count"
    with connection.cursor() as cursor:
        cursor.execute(
            sql.statement(
                connection,
                "INSERT INTO {table} (queue, reason, count) VALUES (%s, %s, %s) " + add,
                table=DROP_TABLE,
            ),
            (queue, reason, n),
        )


def drop_counts(
    connection: BaseDatabaseWrapper, queues: list[str] | None = None
) -> dict[str, dict[str, int]]:
    """Queue -> reason -> messages dropped, every reason present (0 when none)."""
    table = sql.quoted(connection, DROP_TABLE)
    query = f"SELECT queue, reason, count FROM {table}"
    params: tuple[str, ...] = ()
    if queues is not None:
        if not queues:
            return {}
        query += f" WHERE queue IN ({', '.join(['%s'] * len(queues))})"
        params = tuple(queues)
    result: dict[str, dict[str, int]] = {}
    with connection.cursor() as cursor:
        cursor.execute(query + " ORDER BY queue, reason", params)
        for queue, reason, count in cursor.fetchall():
            result.setdefault(queue, dict.fromkeys(DROP_REASONS, 0))[reason] = int(count)
    return result
