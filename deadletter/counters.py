"""Persistent operational bookkeeping beside the queue table: how many messages
each queue lost and why, and which messages were already warned about.

Below `queue.py` (which records a drop in the transaction that deletes the row)
and above nothing but Django's connection: plain upserts, no queue rules.
"""

from __future__ import annotations

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter import keys, sql

__all__ = ["DROP_REASONS", "DropCount", "ExpiryWarning", "drop_counts", "record_drop"]

DROP_REASONS = ("expired", "corrupt", "permanent", "max_attempts")

DROP_TABLE = "deadletter_dropcount"
WARNING_TABLE = "deadletter_expirywarning"


class DropCount(models.Model):
    """Messages of `queue` thrown away for `reason` since the table was created.

    Only ever incremented, in the transaction that deletes the rows, so it is a
    Prometheus counter that survives restarts and is never ahead of the drops.
    """

    queue = models.CharField(max_length=keys.MAX_QUEUE_NAME_BYTES)
    reason = models.CharField(max_length=20)
    count = models.BigIntegerField(default=0)

    class Meta:
        app_label = "deadletter"
        constraints = [
            models.UniqueConstraint(fields=["queue", "reason"], name="deadletter_dropcount_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.queue} {self.reason} {self.count}"


class ExpiryWarning(models.Model):
    """A message (by row key) already warned about as close to its age limit:
    `DEADLETTER_EXPIRY_WARNING` warns once per message, not once per run."""

    key = models.BinaryField(primary_key=True, max_length=keys.MAX_QUEUE_NAME_BYTES + 17)
    warned_at = models.DateTimeField()

    class Meta:
        app_label = "deadletter"

    def __str__(self) -> str:
        return bytes(self.key).hex()


def record_drop(connection: BaseDatabaseWrapper, queue: str, reason: str, n: int = 1) -> None:
    """Add `n` to the drop counter of (`queue`, `reason`); call it inside the
    transaction that deletes the rows, so the count commits or rolls back with them."""
    if n <= 0:
        return
    if reason not in DROP_REASONS:
        raise ValueError(f"unknown drop reason {reason!r}; known: {', '.join(DROP_REASONS)}")
    table = sql.quoted(connection, DROP_TABLE)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (queue, reason, count) VALUES (%s, %s, %s) "
            f"ON CONFLICT (queue, reason) DO UPDATE SET count = {table}.count + excluded.count",
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
