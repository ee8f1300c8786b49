"""Messages a backoff holds back: a failed attempt under a backoff writes the row's
`due_at`, and until then a drain leaves the row alone without charging an attempt.

A drain pass reads a queue in two walks, each by the (due_at, key) index, so it
never reads a row that still waits: the rows no backoff ever held (`due_at`
NULL) in key order (`iter_failed_msgs(due_now=True)`, `claim_failed_msg`), then
the ones whose wait ended before the pass began, in (due_at, key) order
(`due_retries`, `claim_due_retry`). A retry that fails again is due after the
pass began, so no pass hands a message over twice.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from django.db import DatabaseError, transaction
from django.db.models import Q

from deadletter.conf import conf
from deadletter.models import QueuedMessage, QueuePass
from deadletter.queue import age
from deadletter.queue.claims import can_claim_rows
from deadletter.queue.rows import REREAD, OnDrop, Queued, process_row, read_row
from deadletter.store import sql
from deadletter.wire import keys

__all__ = [
    "RetryCursor",
    "Waiting",
    "claim_due_retry",
    "due_retries",
    "last_passes",
    "record_passes",
    "waiting",
    "waiting_keys",
]

logger = logging.getLogger("deadletter")

RetryCursor = tuple[Any, bytes]
"""Where a walk of the due retries is: the last row's `due_at` as the database gave
it, and its key."""


@dataclasses.dataclass(frozen=True, slots=True)
class Waiting:
    """How many messages of a queue wait for their backoff at `now`, and when the
    first of them is due (None when none waits)."""

    count: int
    next_due: datetime | None


def waiting(queue: str, now: datetime) -> Waiting:
    """The messages of `queue` a backoff holds back at `now`: a count over the
    (due_at, key) index alone, and one seek in it for the soonest due."""
    connection = sql.connection()
    low, high = keys.queue_bounds(queue)
    where = "{table}{by_due} WHERE due_at > %s AND {key} >= %s AND {key} < %s"
    params = (connection.ops.adapt_datetimefield_value(now), low, high)
    ((found,),) = sql.read(
        connection, sql.statement(connection, "SELECT COUNT(*) FROM " + where), params
    )
    if not found:
        return Waiting(0, None)
    first = sql.statement(connection, "SELECT due_at FROM " + where + " ORDER BY due_at LIMIT 1")
    rows = sql.read(connection, first, params)
    return Waiting(int(found), _aware(rows[0][0]) if rows else None)


def record_passes(queues: list[str], paused: list[str], at: datetime) -> None:
    """Note that a drain pass over `queues` ended `at`, `paused` stopped by their
    breaker: one upsert each, in one transaction."""
    with transaction.atomic(using=conf.DATABASE):
        for name in queues:
            QueuePass.objects.using(conf.DATABASE).update_or_create(
                queue=name, defaults={"finished_at": at, "paused": name in paused}
            )


def last_passes(queues: list[str]) -> dict[str, QueuePass]:
    """The last recorded pass of each of `queues` that a drain has passed over."""
    found = QueuePass.objects.using(conf.DATABASE).filter(queue__in=queues)
    return {p.queue: p for p in found}


def waiting_keys(queue: str, now: datetime, limit: int | None) -> list[tuple[bytes, datetime]]:
    """The waiting messages of `queue` as (key, due_at), soonest due first (the
    first `limit` of them; every one when None, for a dry run)."""
    rows = _rows().of_queue(queue).filter(due_at__gt=now).order_by("due_at", "key")
    pairs = rows.values_list("key", "due_at")
    return [(bytes(k), due) for k, due in (pairs if limit is None else pairs[:limit])]


def due_retries(
    queue: str,
    before: datetime,
    *,
    until: bytes,
    batch_size: int = 500,
    on_drop: OnDrop | None = None,
) -> Iterator[Queued]:
    """The messages of `queue` up to `until` whose backoff ended by `before`, soonest
    due first, a page at a time; the rules of `iter_failed_msgs` applied to any row
    that is not one plain message. Stops at a database error, logged."""
    connection = sql.connection()
    low = keys.encode_queue_name(queue) + keys.SEPARATOR
    since = connection.ops.adapt_datetimefield_value(before)
    cursor: RetryCursor | None = None
    max_age_ns = age.max_age_ns(queue)
    max_row_bytes = conf.MAX_ROW_BYTES
    try:
        while True:
            query = _retry_sql(connection, cursor, batch_size)
            rows = sql.read(connection, query, _params(since, low, until, cursor))
            cutoff = age.cutoff_ns(max_age=max_age_ns)
            for key, value, due in rows:
                key = bytes(key)
                cursor = (due, key)
                outcome = read_row(
                    connection,
                    queue,
                    keys.prefix_of(key),
                    key,
                    bytes(value or b""),
                    cutoff=cutoff,
                    max_row_bytes=max_row_bytes,
                    max_age_ns=max_age_ns,
                    on_drop=on_drop,
                )
                if isinstance(outcome, Queued):
                    yield outcome
                elif outcome is REREAD:
                    logger.info("due retry rewritten under the drain; next pass key=%s", key.hex())
            if len(rows) < batch_size:
                return
    except DatabaseError:
        logger.exception("reading due retries failed queue=%s", queue)


def claim_due_retry(
    queue: str,
    before: datetime,
    *,
    after: RetryCursor | None,
    until: bytes,
    on_drop: OnDrop | None = None,
) -> tuple[Queued | None, RetryCursor | None]:
    """Lock the first message of `queue` up to `until` whose backoff ended by
    `before`, past `after`, that no other transaction holds; call it inside a
    transaction. Returns it (None when there is none) and the cursor past it.
    Each worker keeps its own cursor: a retry leaves the set once handled."""
    connection = sql.connection()
    if not connection.in_atomic_block:
        raise transaction.TransactionManagementError("claim_due_retry needs a transaction")
    if not can_claim_rows():
        return None, after
    low = keys.encode_queue_name(queue) + keys.SEPARATOR
    prefix = keys.prefix_of(low)
    while True:
        rows = (
            _rows()
            .filter(key__gte=low, key__lte=until, due_at__isnull=False, due_at__lte=before)
            .order_by("due_at", "key")
        )
        if after is not None:
            due, key = after
            rows = rows.filter(Q(due_at__gt=due) | Q(due_at=due, key__gt=key))
        row = rows.select_for_update(skip_locked=True).values_list("key", "value", "due_at").first()
        if row is None:
            return None, after
        key, value, due = bytes(row[0]), bytes(row[1] or b""), row[2]
        after = (due, key)
        outcome = process_row(connection, queue, prefix, key, value, on_drop=on_drop)
        if isinstance(outcome, Queued):
            return outcome, after


def _retry_sql(connection: Any, cursor: RetryCursor | None, limit: int) -> str:
    past = " AND (due_at > %s OR (due_at = %s AND {key} > %s))" if cursor is not None else ""
    return sql.statement(
        connection,
        "SELECT {key}, value, due_at FROM {table}{by_due} "
        "WHERE due_at IS NOT NULL AND due_at <= %s AND {key} >= %s AND {key} <= %s"
        + past
        + " ORDER BY due_at, {key} LIMIT {n}",
        n=int(limit),
    )


def _params(since: Any, low: bytes, until: bytes, cursor: RetryCursor | None) -> tuple[Any, ...]:
    if cursor is None:
        return (since, low, until)
    return (since, low, until, cursor[0], cursor[0], cursor[1])


def _aware(value: Any) -> datetime:
    """A `due_at` read past the ORM: SQLite and MySQL give it naive, in UTC (USE_TZ)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _rows() -> Any:
    return QueuedMessage.objects.using(conf.DATABASE)
