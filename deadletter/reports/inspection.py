"""Read-only views of the queue for operators (the admin and the REST API).

Nothing here writes: an operator looking at a queue must not split, stamp
or drop rows as a side effect (that is the drain's job, through `fetch`).
Every read is a range of the primary-key index, so it costs the same at a
thousand rows as at a million.
"""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter.conf import conf
from deadletter.store import sql
from deadletter.wire import codec, keys
from deadletter.wire.gotime import GoOnlyTime, GoTime
from deadletter.wire.messages import Message

__all__ = [
    "COUNT_CAP",
    "Cause",
    "Count",
    "QueueOverview",
    "QueueSummary",
    "Row",
    "causes_by_queue",
    "expired_keys",
    "get_row",
    "is_too_large",
    "overview",
    "page_rows",
    "queue_names",
    "signatures",
    "summarize",
    "summarize_all",
]

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


# --- the admin's queue overview --------------------------------------------------

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
    older first failure, is counted once its new key is that old.
    """

    name: str
    depth: Count
    oldest_enqueued: datetime | None
    oldest_failure: GoTime | GoOnlyTime | None
    expiring: Count
    expired: Count
    legacy_rows: int
    causes: list[Cause]


def _heads_sql(vendor: str, table: str) -> str:
    """One statement for the lowest key of every queue: a loose index scan as a
    recursive query, each step one seek past the previous queue's range."""
    if vendor == "postgresql":
        nul = "position('\\x00'::bytea IN h.k)"
        after = f"(CASE WHEN {nul} > 0 THEN substring(h.k FROM 1 FOR {nul} - 1) ELSE h.k END)"
        after += " || '\\x01'::bytea"
    else:
        nul = "instr(h.k, X'00')"
        after = f"CAST((CASE WHEN {nul} > 0 THEN substr(h.k, 1, {nul} - 1) ELSE h.k END)"
        after += " || X'01' AS BLOB)"
    return (
        f"WITH RECURSIVE h(k) AS (SELECT (SELECT key FROM {table} ORDER BY key LIMIT 1) "
        f"UNION ALL SELECT (SELECT key FROM {table} WHERE key >= {after} ORDER BY key LIMIT 1) "
        "FROM h WHERE h.k IS NOT NULL) SELECT k FROM h WHERE k IS NOT NULL"
    )


def queue_names() -> list[str]:
    """The name of every queue that holds a row, in key order: one statement
    (`queue.queue_names` asks one query a queue)."""
    connection, table = _cursor()
    with connection.cursor() as cursor:
        cursor.execute(_heads_sql(connection.vendor, table))
        return [keys.queue_of(bytes(k)) for (k,) in cursor.fetchall()]


def signatures(limit: int = MAX_CAUSES) -> list[str]:
    """The first `limit` distinct failure signatures, alphabetically: one seek each
    on the (signature, key) index, however many rows share a signature."""
    connection, table = _cursor()
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
    connection, table = _cursor()
    where = "signature = %s AND key >= %s AND key < %s"
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
    *, now: datetime | None = None, horizon: timedelta | None = None
) -> list[QueueOverview]:
    """Every queue at a glance, in key order: a handful of statements in all, each
    figure a capped key-range count or one seek (see `QueueOverview`)."""
    from deadletter.reports.stats import DEFAULT_HORIZON

    now = now or datetime.now(UTC)
    horizon = horizon if horizon is not None else (conf.EXPIRY_WARNING or DEFAULT_HORIZON)
    expired_before = _ns(now - conf.MAX_QUEUE_AGE)
    expiring_before = _ns(now - conf.MAX_QUEUE_AGE + horizon)
    names = queue_names()
    connection, table = _cursor()
    in_range = "key >= %s AND key < %s"
    head = f"FROM {table} WHERE {in_range} ORDER BY key LIMIT 1"
    columns = ", ".join(
        [
            _capped_sql(table, in_range),
            _capped_sql(table, in_range),
            _capped_sql(table, in_range),
            f"(SELECT COUNT(*) FROM {table} WHERE key = %s)",
            f"(SELECT key {head})",
            f"(SELECT value {head})",
        ]
    )
    selects = []
    for name in names:
        prefix = keys.encode_queue_name(name)
        low, high = keys.message_bounds(name)
        params = [prefix, high]
        params += [low, _key_before(prefix, expiring_before)]
        params += [low, _key_before(prefix, expired_before)]
        params += [prefix, low, high, low, high]
        selects.append((columns, params))
    with connection.cursor() as cursor:
        found = _union_rows(cursor, selects)
    by_queue = causes_by_queue(names)
    return [
        QueueOverview(
            name=name,
            depth=_count(depth),
            oldest_enqueued=_written_at(key),
            oldest_failure=_first_failure(value),
            expiring=_count(expiring),
            expired=_count(expired),
            legacy_rows=int(legacy),
            causes=by_queue.get(name, []),
        )
        for name, (depth, expiring, expired, legacy, key, value) in zip(names, found, strict=True)
    ]


def _key_before(prefix: bytes, before_ns: int) -> bytes:
    """The lowest key of `prefix` written at `before_ns`: rows below it were written before."""
    return keys.make_key(prefix, max(0, min(before_ns, (1 << 64) - 1)), 0)


HEAD_DECODE_LIMIT = 1 << 20
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _written_at(key: Any) -> datetime | None:
    """The head key's time to the microsecond, as `deadletter.reports.stats` gives it."""
    try:
        time_ns = keys.parse_key(bytes(key)).time_ns if key is not None else None
    except ValueError:
        return None
    return _EPOCH + timedelta(microseconds=time_ns // 1000) if time_ns is not None else None


def _first_failure(value: Any) -> GoTime | GoOnlyTime | None:
    """The earliest first failure of the head row's messages (as `deadletter.reports.stats`
    reads it); None when it does not decode, is unstamped or is too big to decode."""
    raw = bytes(value or b"")
    if not raw or len(raw) > HEAD_DECODE_LIMIT:
        return None
    try:
        msgs = codec.decode(raw)
    except codec.CodecError:
        return None
    stamped = [m.queued_at for m in msgs if m.queued_at is not None]
    return min(stamped, key=lambda moment: moment.unix_ns) if stamped else None


def expired_keys(queue: str, *, after: bytes | None = None, limit: int = 500) -> list[bytes]:
    """Keys of `queue` parked before the age limit's cutoff (their messages have
    expired), in key order after `after`: what "purge expired" hands to fetch."""
    cutoff = _ns(datetime.now(UTC) - conf.MAX_QUEUE_AGE)
    prefix = keys.encode_queue_name(queue)
    low = after if after is not None else prefix + keys.SEPARATOR
    high = keys.make_key(prefix, cutoff, 0)
    connection, table = _cursor()
    op = ">" if after is not None else ">="
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT key FROM {table} WHERE key {op} %s AND key < %s "
            f"ORDER BY key LIMIT {int(limit)}",
            (low, high),
        )
        return [bytes(k) for (k,) in cursor.fetchall()]


def _ns(when: datetime) -> int:
    return max(0, int(when.timestamp()) * 1_000_000_000 + when.microsecond * 1000)
