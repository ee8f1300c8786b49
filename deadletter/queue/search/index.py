"""Keeping the search index in step: the indexer turns rows marked `search_pending`
into `SearchTerm` postings, and the sweep removes postings whose row is gone.

No write path writes a posting itself. Every INSERT gets `search_pending = 1`
from the column's database default (a park, the split, a kv import, an NDJSON
load, a move), every UPDATE of a value sets it, so the pending rows are exactly
the rows whose words may be missing. The indexer reads a batch of them, writes
their postings and clears the mark in one short transaction, the mark only where
the value is still the one it read (a row rewritten meanwhile stays pending).
A search indexes at most `REQUEST_ROWS` pending rows of its key range itself and
reads the rest directly beside the index (`lookup`), so it never misses a row and
never indexes a backlog inside a request; the drain service keeps the backlog
near zero.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter.models import SearchTerm
from deadletter.queue.causes import signature_at_park
from deadletter.queue.search.words import terms_of
from deadletter.store import sql
from deadletter.wire import codec, keys
from deadletter.wire.messages import Message

__all__ = [
    "BATCH",
    "REQUEST_ROWS",
    "SWEEP_BATCH",
    "UPKEEP_SECONDS",
    "SweepCursor",
    "cause_of",
    "index_pending",
    "iter_sweep",
    "pending_count",
    "sweep",
    "upkeep",
]

logger = logging.getLogger("deadletter")

BATCH = 500
# The most pending rows one search indexes itself: the few parked since the drain
# service's last pass, not a backlog (the rest is read directly, `lookup`).
REQUEST_ROWS = 50
SWEEP_BATCH = 5000
# One batch's transaction holds SQLite's write lock for about its postings'
# inserts: a batch stops taking rows at this many postings (or after this long
# reading them), so a park waits at most about 0.1 s.
_BATCH_POSTINGS = 2000
_BATCH_SECONDS = 0.1


def _terms_table() -> str:
    return SearchTerm._meta.db_table


def _range(low: bytes, high: bytes | None) -> tuple[str, tuple[bytes, ...]]:
    if high is None:
        return "{key} >= %s", (low,)
    return "{key} >= %s AND {key} < %s", (low, high)


def index_pending(
    connection: BaseDatabaseWrapper | None = None,
    *,
    low: bytes = b"",
    high: bytes | None = None,
    budget: float | None = None,
    limit: int | None = None,
) -> int:
    """Index the pending rows in `[low, high)`, oldest first, in batches of at most
    `BATCH`; how many rows it indexed. With `budget` (seconds) it stops after a
    batch once that is spent, with `limit` once about that many rows are done
    (never more than `limit`), leaving the rest pending."""
    connection = connection or sql.connection()
    where, bounds = _range(low, high)
    select = sql.statement(
        connection,
        "SELECT {key}, value FROM {table} WHERE search_pending = 1 AND "
        + where
        + " ORDER BY search_pending, {key} LIMIT %s",
    )
    clear = sql.statement(
        connection,
        "UPDATE {table} SET search_pending = NULL, signature = COALESCE(signature, %s)"
        " WHERE {key} = %s AND value = %s",
    )
    started = time.monotonic()
    done = 0
    after = low
    while limit is None or done < limit:
        size = BATCH if limit is None else min(BATCH, limit - done)
        rows = sql.read(connection, select, (after, *bounds[1:], size))
        if not rows:
            return done
        indexed = _index_batch(connection, rows, clear)
        done += indexed
        after = bytes(rows[indexed - 1][0]) + b"\x00"
        if budget is not None and time.monotonic() - started >= budget:
            return done
    return done


def _index_batch(connection: BaseDatabaseWrapper, rows: list[tuple], clear: str) -> int:
    """Index the first rows of `rows` (all of them unless the batch is full first);
    how many of them it went through (a row another transaction holds is passed
    over, still pending)."""
    postings: list[tuple[bytes, str]] = []
    settled: list[tuple[str | None, bytes, bytes]] = []
    started = time.monotonic()
    for raw_key, raw_value in rows:
        key, value = bytes(raw_key), bytes(raw_value or b"")
        msgs = _messages(value)
        postings.extend((key, term) for term in terms_of(msgs))
        cause = cause_of(key, msgs)
        settled.append((cause, key, value))
        if len(postings) >= _BATCH_POSTINGS or time.monotonic() - started >= _BATCH_SECONDS:
            break
    taken = len(settled)
    postings.sort(key=lambda posting: (posting[1], posting[0]))  # the index's order
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        held = _held_elsewhere(connection, cursor, [key for _, key, _ in settled])
        if held:
            postings = [p for p in postings if p[0] not in held]
            settled = [row for row in settled if row[1] not in held]
        sql.insert_new(connection, cursor, _terms_table(), ("key", "term"), postings)
        cursor.executemany(clear, settled)
    return taken


def cause_of(key: bytes, msgs: list[Message]) -> str | None:
    """The cause the indexer gives a row stored without one: a row written with its
    LastError by a path that could not say it (the SQLite spool, a load, an
    import) gets it here, as a park would."""
    return signature_at_park(keys.queue_of(key), msgs[0]) if len(msgs) == 1 else None


def _held_elsewhere(
    connection: BaseDatabaseWrapper, cursor: Any, row_keys: list[bytes]
) -> set[bytes]:
    """On a server, lock the rows about to be marked indexed, skipping those another
    transaction holds (a drain's claim while its handler runs): those stay pending,
    and a search checks them itself (`lookup`), so it neither waits for a handler
    nor misses them. SQLite's write lock is the whole file's: nothing to skip."""
    if not row_keys or not sql.can_skip_locked(connection):
        return set()
    marks = ", ".join(["%s"] * len(row_keys))
    cursor.execute(
        sql.statement(
            connection,
            "SELECT {key} FROM {table} WHERE {key} IN ({marks}) FOR UPDATE SKIP LOCKED",
            marks=marks,
        ),
        row_keys,
    )
    return set(row_keys) - {bytes(k) for (k,) in cursor.fetchall()}


def _messages(value: bytes) -> list[Message]:
    """A row's messages; none for a value that does not decode (a search finds such
    a row only by key or cause, which need no posting)."""
    with contextlib.suppress(codec.CodecError):
        return codec.decode(value)
    return []


def pending_rows(
    connection: BaseDatabaseWrapper | None = None,
    *,
    low: bytes = b"",
    high: bytes | None = None,
    limit: int = BATCH,
    descending: bool = False,
) -> list[tuple[Any, ...]]:
    """Up to `limit` rows of `[low, high)` not indexed yet (a backlog, a row a drain
    holds, one written meanwhile): `(key, value, signature)`, oldest first (newest
    first with `descending`), read along the pending index."""
    connection = connection or sql.connection()
    where, bounds = _range(low, high)
    direction = "DESC" if descending else "ASC"
    query = sql.statement(
        connection,
        "SELECT {key}, value, signature FROM {table} WHERE search_pending = 1 AND "
        + where
        + f" ORDER BY search_pending {direction}, {{key}} {direction} LIMIT %s",
    )
    return sql.read(connection, query, (*bounds, limit))


def pending_count(connection: BaseDatabaseWrapper | None = None) -> int:
    """Rows waiting for the indexer (`deadletter_stats` and the metrics show it)."""
    connection = connection or sql.connection()
    rows = sql.read(
        connection,
        sql.statement(connection, "SELECT COUNT(*) FROM {table} WHERE search_pending = 1"),
        (),
    )
    return int(rows[0][0])


def sweep(
    connection: BaseDatabaseWrapper | None = None,
    *,
    after: tuple[str, bytes] | None = None,
    limit: int = SWEEP_BATCH,
) -> tuple[int, tuple[str, bytes] | None]:
    """Remove the postings among the next `limit` (in index order, after `after`)
    whose row is gone; returns how many it removed and where to carry on (None:
    the end of the index was reached, start again from None)."""
    connection = connection or sql.connection()
    terms = sql.quoted(connection, _terms_table())
    key = sql.key_column(connection)
    queue_table = sql.quoted(connection, sql.table())
    where, params = "", ()  # type: tuple[str, tuple[object, ...]]
    if after is not None:
        where = f"WHERE p.term > %s OR (p.term = %s AND p.{key} > %s)"
        params = (after[0], after[0], after[1])
    rows = sql.read(
        connection,
        f"SELECT p.term, p.{key}, (SELECT 1 FROM {queue_table} m WHERE m.{key} = p.{key}) "
        f"FROM {terms} p {where} ORDER BY p.term, p.{key} LIMIT %s",
        (*params, limit),
    )
    dead = [(term, bytes(row_key)) for term, row_key, live in rows if live is None]
    if dead:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.executemany(
                f"DELETE FROM {terms} WHERE term = %s AND {key} = %s",
                dead,
            )
    if len(rows) < limit:
        return len(dead), None
    return len(dead), (rows[-1][0], bytes(rows[-1][1]))


# What the drain service gives the index between two passes.
UPKEEP_SECONDS = 0.5

SweepCursor = tuple[str, bytes] | None


def upkeep(
    connection: BaseDatabaseWrapper | None = None,
    *,
    sweep_after: SweepCursor = None,
    budget: float = UPKEEP_SECONDS,
) -> tuple[int, int, SweepCursor]:
    """The index's share of the drain service's time between passes: the rows
    parked since (for about `budget` seconds), then one sweep batch from
    `sweep_after`; returns rows indexed, postings removed, the next sweep cursor."""
    indexed = index_pending(connection, budget=budget)
    removed, cursor = sweep(connection, after=sweep_after)
    return indexed, removed, cursor


def iter_sweep(connection: BaseDatabaseWrapper | None = None) -> Iterator[int]:
    """The whole index swept batch by batch (`deadletter_stats --sweep`, tests)."""
    cursor: tuple[str, bytes] | None = None
    while True:
        removed, cursor = sweep(connection, after=cursor)
        yield removed
        if cursor is None:
            return
