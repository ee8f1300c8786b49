"""The admin's overview of every queue: depth, head times, expiring and expired
rows, legacy rows and failures by cause, for all queues in a handful of
statements.

Every count stops at `COUNT_CAP`, so the page costs the same at a million
rows as at ten thousand; the head times are read as `reports.summaries` reads
them, so the overview, the stats and the API agree on a queue's head.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter.models import ArchivedMessage
from deadletter.queue import age, alert_parking
from deadletter.queue.api import queue_names
from deadletter.queue.config import queue_config
from deadletter.queue.waiting import last_passes
from deadletter.reports import summaries
from deadletter.store import sql
from deadletter.wire import gotime, keys
from deadletter.wire.gotime import GoOnlyTime, GoTime

__all__ = [
    "COUNT_CAP",
    "MAX_CAUSES",
    "Cause",
    "Count",
    "OverviewTotals",
    "QueueOverview",
    "causes_by_queue",
    "overview",
    "signatures",
    "totals",
]


def _cursor() -> tuple[BaseDatabaseWrapper, str, str]:
    """The queue's connection, its quoted table and key column."""
    connection = sql.connection()
    return connection, sql.quoted(connection, sql.table()), sql.key_column(connection)


# Every count the overview shows stops at this many rows (shown as "10,000+"):
# a COUNT over a key range is linear in the rows it counts, so a capped count
# keeps the page at the same cost at a million rows as at ten thousand.
COUNT_CAP = 10_000
# Distinct failure signatures read (alphabetically) for the overview and the filter.
MAX_CAUSES = 50
# Single-row SELECTs joined into one statement by UNION ALL (SQLite allows 500).
_UNION_CHUNK = 400


@dataclasses.dataclass(frozen=True, slots=True)
class Count:
    """A capped count: exact when `capped` is False, "at least `rows`" otherwise."""

    rows: int
    capped: bool = False

    def __str__(self) -> str:
        return f"{self.rows:,}+" if self.capped else f"{self.rows:,}"


@dataclasses.dataclass(frozen=True, slots=True)
class Cause:
    """Rows of one queue whose last failure has this signature (a capped count)."""

    signature: str
    rows: Count
    queue: str


@dataclasses.dataclass(frozen=True, slots=True)
class QueueOverview:
    """One queue as an operator sees it; every figure is a bounded index read and
    means what `deadletter.reports.stats` means by it (up to `COUNT_CAP`).

    `depth` counts every row of the queue (a legacy aggregate as one row).
    `oldest_enqueued` is the head key's time and `oldest_failure` the first
    failure of the head row's messages. `expiring` counts rows parked (by
    their key's time, which a message's first failure never follows) before
    `now - max age + horizon`: expired already or expiring within the
    horizon, as `stats.collect` counts them; `expired` those parked before
    `now - max age`. A partly delivered remainder, parked again with its
    older first failure, is counted once its new key is that old. `waiting`
    counts the messages a backoff holds back at `now`; `paused` says whether
    the last drain pass stopped the queue by its breaker; `no_handler` that rows
    are parked for which the drain has no handler; `archived` counts the queue's
    archive entries (on the archive's queue index, in the same statement), and
    `killed` those of them set aside because their handler killed its process
    (`drain.kills`: a poison message an operator should look at). Max age is the
    queue's own (`limits.max_age`).
    """

    name: str
    depth: Count
    oldest_enqueued: datetime | None
    oldest_failure: GoTime | GoOnlyTime | None
    expiring: Count
    expired: Count
    legacy_rows: int
    causes: list[Cause]
    waiting: Count = Count(0, False)
    paused: bool = False
    no_handler: bool = False  # rows are parked and DEADLETTER_HANDLERS names no handler
    archived: Count = Count(0, False)  # the queue's entries in the archive
    killed: Count = Count(0, False)  # of them, set aside because their handler killed its process


def signatures(limit: int = MAX_CAUSES) -> list[str]:
    """The first `limit` distinct failure signatures, alphabetically: one seek each
    on the (signature, key) index, however many rows share a signature."""
    connection, table, _ = _cursor()
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH RECURSIVE s(v) AS (SELECT (SELECT signature FROM {table} "
            "WHERE signature IS NOT NULL ORDER BY signature LIMIT 1) "
            f"UNION ALL SELECT (SELECT signature FROM {table} WHERE signature > s.v "
            "ORDER BY signature LIMIT 1) FROM s WHERE s.v IS NOT NULL) "
            f"SELECT v FROM s WHERE v IS NOT NULL LIMIT {int(limit)}"
        )
        return [v for (v,) in cursor.fetchall()]


def _capped_sql(table: str, where: str) -> str:
    """A COUNT that stops one row past `COUNT_CAP` (so `_count` can tell "more")."""
    limit = int(COUNT_CAP) + 1
    return f"(SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE {where} LIMIT {limit}) AS c)"


def _count(n: Any) -> Count:
    return Count(min(int(n), COUNT_CAP), int(n) > COUNT_CAP)


def _union_rows(cursor: Any, selects: list[tuple[str, list[Any]]]) -> list[tuple[Any, ...]]:
    """Run single-row SELECTs (column lists) as few UNION ALL statements; rows in order."""
    found: list[tuple[Any, ...]] = []
    for start in range(0, len(selects), _UNION_CHUNK):
        chunk = selects[start : start + _UNION_CHUNK]
        statement = " UNION ALL ".join(
            f"SELECT {start + i} AS i, {columns}" for i, (columns, _) in enumerate(chunk)
        )
        params = [p for _, ps in chunk for p in ps]
        cursor.execute(f"SELECT * FROM ({statement}) AS u ORDER BY i", params)
        found += [tuple(row[1:]) for row in cursor.fetchall()]
    return found


def causes_by_queue(names: list[str]) -> dict[str, list[Cause]]:
    """Per queue, its rows per failure signature (most first), each a capped count
    of one range of the (signature, key) index; rows are never decoded."""
    sigs = signatures()
    if not sigs or not names:
        return {}
    connection, table, key = _cursor()
    where = f"signature = %s AND {key} >= %s AND {key} < %s"
    pairs = [(name, sig) for name in names for sig in sigs]
    selects = [
        (_capped_sql(table, where), [sig, *keys.message_bounds(name)]) for name, sig in pairs
    ]
    with connection.cursor() as cursor:
        counts = _union_rows(cursor, selects)
    grouped: dict[str, list[Cause]] = {}
    for (name, sig), (n,) in zip(pairs, counts, strict=True):
        if n:
            grouped.setdefault(name, []).append(Cause(sig, _count(n), name))
    for listed in grouped.values():
        listed.sort(key=lambda c: (-c.rows.rows, c.signature))
    return grouped


def overview(
    names: list[str] | None = None,
    *,
    now: datetime | None = None,
    horizon: timedelta | None = None,
) -> list[QueueOverview]:
    """`names` (every queue holding a row when None; a page of `reports.queues` for
    the admin) at a glance, in that order: a handful of statements for a page, each
    figure a capped key-range count or one seek (see `QueueOverview`)."""
    now = now or datetime.now(UTC)
    horizon = summaries.horizon_or_default(horizon)
    now_ns = gotime.epoch_ns(now)
    ahead = gotime.duration_ns(horizon)
    if names is None:
        names = queue_names()
    connection, table, key = _cursor()
    archive = sql.quoted(connection, ArchivedMessage._meta.db_table)
    in_range = f"{key} >= %s AND {key} < %s"
    head = f"FROM {table} WHERE {in_range} ORDER BY {key} LIMIT 1"
    # Named: MySQL names a derived table's columns by their text with the
    # parameters in, and two equal bounds (both cutoffs before the epoch) collide.
    columns = ", ".join(
        f"{column} AS c{i}"
        for i, column in enumerate(
            [
                _capped_sql(table, in_range),
                _capped_sql(table, in_range),
                _capped_sql(table, in_range),
                f"(SELECT COUNT(*) FROM {table} WHERE {key} = %s)",
                f"(SELECT {key} {head})",
                f"(SELECT value {head})",
                _capped_sql(table, f"due_at > %s AND {in_range}"),
                _capped_sql(archive, "queue = %s"),
                _capped_sql(archive, "queue = %s AND reason = %s"),
            ]
        )
    )
    due_now = connection.ops.adapt_datetimefield_value(now)
    selects = []
    for name in names:
        prefix = keys.encode_queue_name(name)
        low, high = keys.message_bounds(name)
        expired_before = age.cutoff_ns(now_ns, queue=name)
        expiring_before = expired_before + ahead
        params: list[Any] = [prefix, high]
        params += [low, _key_before(prefix, expiring_before)]
        params += [low, _key_before(prefix, expired_before)]
        params += [prefix, low, high, low, high]
        params += [due_now, low, high]
        params += [name]
        params += [name, ArchivedMessage.Reason.KILLED.value]
        selects.append((columns, params))
    with connection.cursor() as cursor:
        found = _union_rows(cursor, selects)
    by_queue = causes_by_queue(names)
    passes = last_passes(names)
    return [
        QueueOverview(
            name=name,
            depth=_count(depth),
            oldest_enqueued=keys.written_at(bytes(key)) if key is not None else None,
            oldest_failure=summaries.first_failure(value),
            expiring=_count(expiring),
            expired=_count(expired),
            legacy_rows=int(legacy),
            causes=by_queue.get(name, []),
            waiting=_count(waiting),
            paused=name in passes and passes[name].paused,
            no_handler=bool(depth) and queue_config(name) is None and name != alert_parking.QUEUE,
            archived=_count(archived),
            killed=_count(killed),
        )
        for name, (depth, expiring, expired, legacy, key, value, waiting, archived, killed) in zip(
            names, found, strict=True
        )
    ]


def _key_before(prefix: bytes, before_ns: int) -> bytes:
    """The lowest key of `prefix` written at `before_ns`: rows below it were written before."""
    return keys.make_key(prefix, max(0, min(before_ns, (1 << 64) - 1)), 0)


@dataclasses.dataclass(frozen=True, slots=True)
class OverviewTotals:
    """Every queue together, as capped counts: rows, and messages a backoff holds back."""

    rows: Count
    waiting: Count


def totals(*, now: datetime | None = None) -> OverviewTotals:
    """The overview's totals over every queue: one statement of two capped counts,
    whatever the number of queues."""
    now = now or datetime.now(UTC)
    connection, table, _ = _cursor()
    by_due = sql.statement(connection, "{table}{by_due}")
    rows_sql = _capped_sql(table, "1 = 1")
    waiting_sql = _capped_sql(by_due, "due_at > %s")
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {rows_sql}, {waiting_sql}",
            [connection.ops.adapt_datetimefield_value(now)],
        )
        ((rows, waiting),) = cursor.fetchall()
    return OverviewTotals(_count(rows), _count(waiting))
