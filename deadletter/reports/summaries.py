"""Every queue at a glance: depth, head and the age of the head, the figures every
report starts from (the REST API's queue list, `stats`, the metrics, expiry).

Depths are key-range counts of the primary-key index (`store.scans`), never
decoded rows; only each queue's head row is decoded, for the time its
message first failed. The reading of a head (its key's time, its first
failure) and the expiry horizon are defined here once; the admin's overview
reads the same heads through `reports.overview`.
"""

from __future__ import annotations

import dataclasses
import time
from datetime import timedelta
from typing import Any

from django.db import DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter.conf import conf
from deadletter.store import scans, sql
from deadletter.wire import codec, gotime, keys

__all__ = [
    "DEFAULT_HORIZON",
    "QueueStatus",
    "first_failure",
    "horizon_or_default",
    "queue_status",
    "queue_statuses",
]

# A head row larger than this is not decoded for its first-failure time.
HEAD_DECODE_LIMIT = 1 << 20
# How far ahead "expiring" looks when neither the caller nor DEADLETTER_EXPIRY_WARNING says.
DEFAULT_HORIZON = timedelta(days=1)


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
            return (now - gotime.epoch_ns(self.oldest_queued_at)) / 1e9
        if self.oldest_enqueued_ns is not None:
            return (now - self.oldest_enqueued_ns) / 1e9
        return None


def horizon_or_default(horizon: timedelta | None) -> timedelta:
    """How far ahead "expiring" looks: `horizon`, else `DEADLETTER_EXPIRY_WARNING`,
    else a day."""
    return horizon if horizon is not None else (conf.EXPIRY_WARNING or DEFAULT_HORIZON)


def first_failure(value: Any) -> Any:
    """The earliest first failure (`queued_at`) of a head row's messages; None when
    it does not decode, is unstamped or is too big to decode."""
    raw = bytes(value or b"")
    if not raw or len(raw) > HEAD_DECODE_LIMIT:
        return None
    try:
        msgs = codec.decode(raw)
    except (codec.CodecError, DatabaseError):
        return None
    stamped = [m.queued_at for m in msgs if m.queued_at is not None]
    return min(stamped, key=gotime.epoch_ns) if stamped else None


def queue_statuses() -> list[QueueStatus]:
    """Every queue that holds a row, in key order. Raises `DatabaseError`."""
    connection = sql.connection()
    with scans.snapshot(connection):
        return [_status(connection, p, d) for p, d in scans.queue_depths(connection)]


def queue_status(name: str) -> QueueStatus:
    """One queue (depth 0 when it holds nothing); `ValueError` for an invalid name."""
    prefix = keys.encode_queue_name(name)
    connection = sql.connection()
    with scans.snapshot(connection):
        return _status(connection, prefix, scans.count_queue(connection, prefix))


def _status(connection: BaseDatabaseWrapper, prefix: bytes, depth: int) -> QueueStatus:
    name = prefix.decode("utf-8", errors="replace")
    head = sql.read(
        connection,
        sql.statement(
            connection,
            "SELECT {key}, value FROM {table} WHERE {key} >= %s AND {key} < %s "
            "ORDER BY {key} LIMIT 1",
        ),
        (prefix + keys.SEPARATOR, prefix + b"\x01"),
    )
    if not head:
        return QueueStatus(name, depth, None, None)
    key, value = bytes(head[0][0]), head[0][1]
    try:
        enqueued: int | None = keys.parse_key(key).time_ns
    except ValueError:
        enqueued = None
    return QueueStatus(name, depth, enqueued, first_failure(value))
