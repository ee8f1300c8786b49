"""Causes as incidents: each failure signature of each queue is a `Cause` row with
first and last seen, a count and a status an operator sets (acknowledged,
resolved, muted until a time).

Every write that records a failure calls `note_failure` in its own transaction:
one upsert on the (queue, signature) unique index, no read first, so the causes
stay in step with the queue without counting it. A resolved cause seen again
reopens in that statement; a mute past its `muted_until` is read as open (no
writer needs to come by when it ends).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import UTC, datetime

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Q, QuerySet

from deadletter.conf import conf
from deadletter.models import Cause
from deadletter.store import sql

__all__ = [
    "acknowledge",
    "causes",
    "effective_status",
    "for_queues",
    "mute",
    "note_failure",
    "open_causes",
    "resolve",
    "resolved_causes",
    "status_q",
]

logger = logging.getLogger("deadletter")

Status = Cause.Status

# The assignments in this order: MySQL's ON DUPLICATE KEY UPDATE reads a column
# set earlier in the list as already set, so `status` goes last.
_UPSERT = (
    "INSERT INTO {table} (queue, signature, first_seen, last_seen, {count}, status,"
    " opened_at, reopened, owner, note) VALUES (%s, %s, %s, %s, %s, 'open', %s, {false}, '', '')"
    " {on_conflict}"
    " {count} = {table}.{count} + {new_count},"
    " last_seen = CASE WHEN {new_last_seen} > {table}.last_seen"
    " THEN {new_last_seen} ELSE {table}.last_seen END,"
    " opened_at = CASE WHEN {table}.status = 'resolved' THEN {new_opened_at}"
    " ELSE {table}.opened_at END,"
    " reopened = CASE WHEN {table}.status = 'resolved' THEN {true} ELSE {table}.reopened END,"
    " resolved_at = CASE WHEN {table}.status = 'resolved' THEN NULL ELSE {table}.resolved_at END,"
    " status = CASE WHEN {table}.status = 'resolved' THEN 'open' ELSE {table}.status END"
)


def _table() -> str:
    return Cause._meta.db_table


def _upsert_sql(connection: BaseDatabaseWrapper) -> str:
    """The upsert in this backend's spelling: MySQL/MariaDB name the row that was
    to go in `VALUES(column)`, the others `EXCLUDED.column`."""
    mysql = connection.vendor == "mysql"
    count = connection.ops.quote_name("count")

    def new(column: str) -> str:
        return f"VALUES({column})" if mysql else f"EXCLUDED.{column}"

    sqlite = connection.vendor == "sqlite"
    return sql.statement(
        connection,
        _UPSERT,
        table=_table(),
        count=count,
        on_conflict="ON DUPLICATE KEY UPDATE"
        if mysql
        else "ON CONFLICT (queue, signature) DO UPDATE SET",
        new_count=new(count),
        new_last_seen=new("last_seen"),
        new_opened_at=new("opened_at"),
        true="1" if sqlite else "TRUE",
        false="0" if sqlite else "FALSE",
    )


def note_failure(
    connection: BaseDatabaseWrapper,
    queue: str,
    signature: str | None,
    *,
    at: datetime,
    n: int = 1,
) -> None:
    """Add `n` failures of `signature` in `queue` seen `at` to its cause, in the
    caller's transaction on `connection`, with no savepoint of its own (a failure
    rolls the caller's change back with it): one upsert, no read. A new cause opens;
    a resolved one opens again (`reopened`, `opened_at` = `at`); an acknowledged or
    muted one keeps its status. Nothing for a None signature. Raises the driver's
    `DatabaseError`."""
    if signature is None or n <= 0:
        return
    when = connection.ops.adapt_datetimefield_value(at)
    with connection.cursor() as cursor:
        cursor.execute(_upsert_sql(connection), (queue, signature, when, when, n, when))


def now() -> datetime:
    return datetime.now(UTC)


def status_q(status: str, at: datetime | None = None) -> Q:
    """The causes whose status, as read `at` (now when None), is `status`: a mute
    past its `muted_until` reads open."""
    at = at or now()
    ended = Q(status=Status.MUTED) & (Q(muted_until__isnull=True) | Q(muted_until__lte=at))
    if status == Status.OPEN:
        return Q(status=Status.OPEN) | ended
    if status == Status.MUTED:
        return Q(status=Status.MUTED, muted_until__gt=at)
    return Q(status=status)


def effective_status(cause: Cause, at: datetime | None = None) -> str:
    """`cause.status` as read `at` (now when None): open once a mute has ended."""
    if cause.status == Status.MUTED:
        until = cause.muted_until
        if until is None or until <= (at or now()):
            return Status.OPEN
    return str(cause.status)


def causes() -> QuerySet[Cause]:
    """Every cause, on the queue's database."""
    return Cause.objects.using(conf.DATABASE).all()


def open_causes(since: datetime | None = None, *, at: datetime | None = None) -> list[Cause]:
    """The causes open `at` (now when None; an ended mute counts), those opened (first
    seen, or reopened) at or after `since` only when it is given, oldest opened first:
    what the new_cause and reopened_cause alerts read (`reopened` tells them apart)."""
    found = causes().filter(status_q(Status.OPEN, at))
    if since is not None:
        found = found.filter(opened_at__gte=since)
    return list(found.order_by("opened_at", "id"))


def resolved_causes(since: datetime) -> list[Cause]:
    """The causes resolved at or after `since`, oldest resolve first: a "resolved"
    note for an alert sent about them."""
    found = causes().filter(status=Status.RESOLVED, resolved_at__gte=since)
    return list(found.order_by("resolved_at", "id"))


def for_queues(names: Iterable[str]) -> dict[tuple[str, str], Cause]:
    """The causes of the queues `names` by (queue, signature): one statement on the
    (queue, last_seen, id) index, for a page that shows a few queues' causes."""
    return {(c.queue, c.signature): c for c in causes().filter(queue__in=list(names))}


def acknowledge(ids: Iterable[int], *, owner: str, note: str | None = None) -> int:
    """Mark the causes `ids` acknowledged by `owner` (a mute ends), with `note` when
    given (else the note stays); how many there were."""
    changes: dict[str, object] = {
        "status": Status.ACKNOWLEDGED,
        "owner": owner,
        "muted_until": None,
    }
    if note is not None:
        changes["note"] = note
    done = causes().filter(id__in=list(ids)).update(**changes)
    logger.info("causes acknowledged owner=%s count=%d", owner, done)
    return done


def resolve(ids: Iterable[int], *, actor: str, at: datetime | None = None) -> int:
    """Mark the causes `ids` resolved (the next failure of one reopens it); how many."""
    done = (
        causes()
        .filter(id__in=list(ids))
        .update(status=Status.RESOLVED, resolved_at=at or now(), muted_until=None)
    )
    logger.info("causes resolved actor=%s count=%d", actor, done)
    return done


def mute(ids: Iterable[int], *, until: datetime, actor: str) -> int:
    """Mute the causes `ids` until `until` (then they read open again); how many.
    `ValueError` for a naive `until`."""
    if until.tzinfo is None:
        raise ValueError("until must be an aware datetime")
    done = causes().filter(id__in=list(ids)).update(status=Status.MUTED, muted_until=until)
    logger.info("causes muted actor=%s until=%s count=%d", actor, until.isoformat(), done)
    return done
