"""Index scans of the table by queue: every queue's head key in one statement,
a page of queue names from a bound either way in another, and each queue's
depth from key-range counts, never from decoded rows.

On SQLite the counts are arranged so a million rows answer in tens of
milliseconds: SQLite counts a whole table from its b-tree pages without
reading each entry, and a one-sided range `key >= x` without comparing each
key, while a two-sided range compares every key (about three times the
one-sided cost). So small queues are counted exactly by a bounded probe; the
first big queue's depth is the table's count less every other queue's, and
the last two big queues are counted one-sided to the table's end, less what
follows them.
"""

from __future__ import annotations

import contextlib

from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter.store import sql
from deadletter.wire import keys

__all__ = [
    "PROBE_ROWS",
    "count_queue",
    "count_range",
    "depths",
    "queue_depths",
    "queue_heads",
    "queue_keys",
    "snapshot",
]

# A queue with at most this many rows is counted exactly by its probe.
PROBE_ROWS = 5000


def _walk_sql(
    connection: BaseDatabaseWrapper,
    table: str,
    *,
    bounded: bool,
    descending: bool,
    limit: int | None,
) -> str:
    """A loose index scan as a recursive query: each step one seek past the
    previous queue's range `[name, name 0x01)` (`descending`: to the key below
    `name`). `bounded`: the first step starts at the bound given as the
    parameter (at or above it; `descending`: below it), else at the table's end.
    At most `limit` steps when given."""
    vendor = connection.vendor
    key = sql.key_column(connection)
    if vendor == "postgresql":
        nul = "position('\\x00'::bytea IN h.k)"
        cut = f"(CASE WHEN {nul} > 0 THEN substring(h.k FROM 1 FOR {nul} - 1) ELSE h.k END)"
        name, past = cut, f"{cut} || '\\x01'::bytea"
    elif vendor == "mysql":
        nul = "LOCATE(X'00', h.k)"
        cut = f"(CASE WHEN {nul} > 0 THEN SUBSTRING(h.k, 1, {nul} - 1) ELSE h.k END)"
        name, past = cut, f"CONCAT({cut}, X'01')"
    else:
        nul = "instr(h.k, X'00')"
        cut = f"(CASE WHEN {nul} > 0 THEN substr(h.k, 1, {nul} - 1) ELSE h.k END)"
        name, past = f"CAST({cut} AS BLOB)", f"CAST({cut} || X'01' AS BLOB)"
    if descending:
        order, first, step = f"{key} DESC", f"{key} < %s", f"{key} < {name}"
    else:
        order, first, step = key, f"{key} >= %s", f"{key} >= {past}"
    where = f" WHERE {first}" if bounded else ""
    head = f"SELECT (SELECT {key} FROM {table}{where} ORDER BY {order} LIMIT 1)"
    tail = f"SELECT (SELECT {key} FROM {table} WHERE {step} ORDER BY {order} LIMIT 1)"
    if limit is None:
        return (
            f"WITH RECURSIVE h(k) AS ({head} UNION ALL {tail} FROM h WHERE h.k IS NOT NULL) "
            "SELECT k FROM h WHERE k IS NOT NULL"
        )
    return (
        f"WITH RECURSIVE h(k, n) AS ({head}, 1 UNION ALL {tail}, h.n + 1 FROM h "
        f"WHERE h.k IS NOT NULL AND h.n < {int(limit)}) SELECT k FROM h WHERE k IS NOT NULL"
    )


def queue_heads(connection: BaseDatabaseWrapper, table: str | None = None) -> list[bytes]:
    """The lowest key of every queue in `table` (the queue table by default), in key
    order: a legacy key when the queue has an aggregate. One statement, one
    index seek a queue, however many rows each holds."""
    quoted = sql.quoted(connection, table or sql.table())
    query = _walk_sql(connection, quoted, bounded=False, descending=False, limit=None)
    return [bytes(k) for (k,) in sql.read(connection, query, ())]


def queue_keys(
    connection: BaseDatabaseWrapper, bound: bytes | None, *, descending: bool, limit: int
) -> list[bytes]:
    """One key of each of up to `limit` queues, nearest first: the lowest key of
    each queue with a key at or above `bound` (`descending`: the highest key of
    each below it; from the table's end when None). One statement of at most
    `limit` index seeks, however many queues and rows there are."""
    quoted = sql.quoted(connection, sql.table())
    query = _walk_sql(
        connection, quoted, bounded=bound is not None, descending=descending, limit=limit
    )
    params = () if bound is None else (bound,)
    return [bytes(k) for (k,) in sql.read(connection, query, params)]


class snapshot:  # used as a context manager, like contextlib's
    """One read transaction around several counts on SQLite, so that the table's
    count and the ranges' counts see the same rows (WAL readers never block
    writers). Inside a caller's transaction the caller's snapshot is used as it is."""

    def __init__(self, connection: BaseDatabaseWrapper) -> None:
        self.connection = connection
        self.began = False

    def __enter__(self) -> None:
        c = self.connection
        if c.vendor == "sqlite" and not c.in_atomic_block:
            c.ensure_connection()
            if not c.connection.in_transaction:
                c.connection.execute("BEGIN DEFERRED")
                self.began = True

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if not self.began:
            return
        if exc_type is None:
            self.connection.connection.execute("COMMIT")
        else:
            with contextlib.suppress(Exception):
                self.connection.connection.execute("ROLLBACK")


def count_range(connection: BaseDatabaseWrapper, low: bytes, high: bytes | None) -> int:
    """Rows with `low <= key < high` (to the table's end when `high` is None)."""
    if high is None:
        query = sql.statement(connection, "SELECT COUNT(*) FROM {table} WHERE {key} >= %s")
        rows = sql.read(connection, query, (low,))
    else:
        query = sql.statement(
            connection, "SELECT COUNT(*) FROM {table} WHERE {key} >= %s AND {key} < %s"
        )
        rows = sql.read(connection, query, (low, high))
    return int(rows[0][0])


def count_queue(connection: BaseDatabaseWrapper, prefix: bytes) -> int:
    """Every row of the queue `prefix` names, its legacy row included."""
    return count_range(connection, prefix, prefix + b"\x01")


def queue_depths(connection: BaseDatabaseWrapper) -> list[tuple[bytes, int]]:
    """Every queue that holds a row, as (encoded name, depth), in key order, all
    counted in one snapshot."""
    with snapshot(connection):
        prefixes = [keys.prefix_of(head) for head in queue_heads(connection)]
        return list(zip(prefixes, depths(connection, prefixes), strict=True))


def depths(connection: BaseDatabaseWrapper, prefixes: list[bytes]) -> list[int]:
    """The row count of each queue (`prefixes` in key order, disjoint ranges), by
    the arrangement in the module docstring on SQLite; call it inside `snapshot`."""
    if connection.vendor != "sqlite":
        return [count_queue(connection, p) for p in prefixes]
    table = sql.quoted(connection, sql.table())
    probe = sql.statement(
        connection,
        "SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE {key} >= %s AND {key} < %s LIMIT {n})",
        n=PROBE_ROWS + 1,
    )
    found = [int(sql.read(connection, probe, (p, p + b"\x01"))[0][0]) for p in prefixes]
    big = [i for i, depth in enumerate(found) if depth > PROBE_ROWS]
    if not big:
        return found
    derived, suffixed = big[0], big[1:][-2:]
    for i in big[1:]:
        if i not in suffixed:
            found[i] = count_queue(connection, prefixes[i])
    for i in reversed(suffixed):
        found[i] = count_range(connection, prefixes[i], None) - sum(found[i + 1 :])
    total = int(sql.read(connection, f"SELECT COUNT(*) FROM {table}", ())[0][0])
    found[derived] = max(0, total - sum(d for i, d in enumerate(found) if i != derived))
    return found
