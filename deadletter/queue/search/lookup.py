"""Running a search: walk the index in key order, join the live row, keep what the
query itself says matches.

The walk is driven by one index, chosen per query: the postings of its rarest
term (the next rarest, up to `_SEEKS`, checked by a seek into the same index;
the rarity judged on the longest `_ESTIMATED` terms only, so a long phrase costs
what a short one does), else the (signature, key) index for a cause, else the key
range itself. Every candidate row is checked against the query
(`Query.matches`), so a stale posting (of a row since rewritten) or a term left
out of the statement costs a check and never a wrong answer. Pages are read in
key order from a cursor, never counted, so a first page stops once it is full.

Rows not indexed yet (`search_pending`: a backlog a load or an import left, a row
a drain holds) are read along their own index and checked directly, merged in
key order; a search indexes at most `index.REQUEST_ROWS` of them itself. For
each window of the range the pending rows are read before the index's
candidates of the same window, so a row the indexer clears meanwhile is never
missed, and one found both ways is yielded once.

A request reads at most `budget` candidates (postings walked and pending rows
checked, `MAX_CANDIDATES` for a page), for at most `MAX_SECONDS`: past either,
before the answer is complete, it stops with `SearchTooCostly` instead of
answering late or wrongly; a count so bounded answers "at least N" (`Count`).
Commands and redrives read without a bound.

A search kept to some key ranges (`spans`: a user's granted queues,
`queue.access.Scope.spans`) walks each range in turn, the pending rows, the
index and the rows of that range only, so a page fills with matches of those
ranges however many matches other queues hold.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter.models import SearchTerm
from deadletter.queue import redaction
from deadletter.queue.search import index
from deadletter.queue.search.grammar import SearchError
from deadletter.queue.search.query import Query
from deadletter.store import sql
from deadletter.wire import codec, keys
from deadletter.wire.messages import Message

__all__ = [
    "MAX_CANDIDATES",
    "MAX_SECONDS",
    "SearchTooCostly",
    "Count",
    "count_matching",
    "iter_matching_rows",
    "keys_page",
    "matching_keys",
]

# Candidates read a statement: a page's worth first, then more each time.
_FIRST_BATCH = 51
_MAX_BATCH = 500
# The rarest term is judged by counting up to this many of its postings, for at
# most `_ESTIMATED` terms (the longest: rarer as a rule); at most `_SEEKS` more
# terms narrow the statement. The check of each candidate reads every term.
_ESTIMATE_CAP = 2000
_ESTIMATED = 6
_SEEKS = 2
# What one page (or one admin action) may read before it gives up: each candidate
# is decoded and checked, 10 to 90 us (docs/search.md has the figures).
MAX_CANDIDATES = 5_000
# And for at most this long, on a loaded machine (a candidate took up to 260 us on
# one running eight test suites at once).
MAX_SECONDS = 0.7

Bounds = tuple[bytes, bytes | None]


class SearchTooCostly(SearchError):
    """A search that would read more than its request may to answer exactly."""


class _Budget:
    """The candidates a request has left to read, and until when; None: no bound."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.left = limit
        # A page's time, and as much more as a larger bound (an admin action) reads.
        self.seconds = 0.0 if limit is None else MAX_SECONDS * max(1.0, limit / MAX_CANDIDATES)
        self.until = None if limit is None else time.monotonic() + self.seconds

    def take(self, wanted: int) -> int:
        """How many of `wanted` candidates the next read may take (at least 1);
        `SearchTooCostly` once none are left or the time is spent."""
        if self.left is None or self.limit is None:
            return wanted
        if self.left <= 0 or (self.until is not None and time.monotonic() >= self.until):
            raise SearchTooCostly(
                f"the search read {self.limit - self.left:,} messages without reaching the "
                f"end of its answer (it may read {self.limit:,}, for at most "
                f"{self.seconds:g} s): narrow it (a queue, a rarer word, a phrase, key:, "
                "cause:, after:), or run deadletter_dump --search, which has no such bound"
            )
        return min(wanted, self.left)

    def spend(self, read: int) -> None:
        if self.left is not None:
            self.left -= read


def _scope(query: Query, queue: str | None) -> Bounds | None:
    """The key range the query can match in: the queue's and every key prefix's,
    intersected; None when they do not meet."""
    low, high = keys.queue_bounds(queue) if queue is not None else (b"", None)
    for prefix in query.prefixes:
        p_low, p_high = prefix.bounds()
        low = max(low, p_low)
        high = p_high if high is None else (high if p_high is None else min(high, p_high))
    if high is not None and low >= high:
        return None
    return low, high


def _narrow(bounds: Bounds, after: bytes | None, before: bytes | None) -> Bounds | None:
    low, high = bounds
    if after is not None:
        low = max(low, after + keys.SEPARATOR)
    if before is not None:
        high = before if high is None else min(high, before)
    if high is not None and low >= high:
        return None
    return low, high


def _ranges(bounds: Bounds, spans: Sequence[Bounds] | None, descending: bool) -> list[Bounds]:
    """`bounds` cut to each of `spans` (sorted, disjoint; None: no cut) that it
    meets, in the order read."""
    if spans is None:
        return [bounds]
    low, high = bounds
    found: list[Bounds] = []
    for span_low, span_high in spans:
        cut = _narrow((max(low, span_low), span_high), None, high)
        if cut is not None:
            found.append(cut)
    return found[::-1] if descending else found


def _rest(bounds: Bounds, last: bytes, descending: bool) -> Bounds | None:
    """What is left of `bounds` past `last` in the direction read."""
    low, high = bounds
    return _narrow(bounds, None, last) if descending else _narrow((low, high), last, None)


class _Walk:
    """The candidate rows of one query in one key range, a batch at a time."""

    def __init__(self, connection: BaseDatabaseWrapper, query: Query, bounds: Bounds) -> None:
        self.connection = connection
        self.query = query
        self.bounds = bounds
        self.key = sql.key_column(connection)
        self.rows = sql.quoted(connection, sql.table())
        self.terms = sql.quoted(connection, SearchTerm._meta.db_table)
        self.order = self._terms_by_rarity()

    def _range_sql(self, column: str, low: bytes, high: bytes | None) -> tuple[str, list[Any]]:
        if high is None:
            return f"{column} >= %s", [low]
        return f"{column} >= %s AND {column} < %s", [low, high]

    def _terms_by_rarity(self) -> list[str]:
        """The driving term, then the seeks: the rarest of the longest terms."""
        terms = sorted(self.query.terms, key=lambda term: (-len(term), term))[:_ESTIMATED]
        if len(terms) < 2:
            return terms
        low, high = self.bounds
        where, params = self._range_sql(self.key, low, high)
        counts = {}
        for term in terms:
            rows = sql.read(
                self.connection,
                f"SELECT COUNT(*) FROM (SELECT 1 FROM {self.terms} WHERE term = %s AND {where} "
                f"LIMIT {_ESTIMATE_CAP}) t",
                (term, *params),
            )
            counts[term] = int(rows[0][0])
        return sorted(terms, key=lambda term: (counts[term], term))[: 1 + _SEEKS]

    def batch(
        self, bounds: Bounds, descending: bool, size: int
    ) -> tuple[list[tuple[Any, ...]], Bounds | None]:
        """The candidates `(key, value, signature)` among the next `size` postings of
        the driving term (or rows of the range) in `bounds`, in order; and what is
        left of `bounds` after them (None: nothing)."""
        direction = "DESC" if descending else "ASC"
        causes = [cause.signature for cause in self.query.causes]
        low, high = bounds
        if not self.order:
            where, params = self._range_sql(self.key, low, high)
            signature = " AND signature = %s" * len(causes)
            rows = sql.read(
                self.connection,
                f"SELECT {self.key}, value, signature FROM {self.rows} "
                f"WHERE {where}{signature} ORDER BY {self.key} {direction} LIMIT %s",
                [*params, *causes, size],
            )
            rest = _rest(bounds, bytes(rows[-1][0]), descending) if len(rows) == size else None
            return rows, rest
        # The window of the next `size` postings first (an index-only read), so the
        # seeks and the join below never walk further than that, however few match.
        where, params = self._range_sql(self.key, low, high)
        edge = sql.read(
            self.connection,
            f"SELECT {self.key} FROM {self.terms} WHERE term = %s AND {where} "
            f"ORDER BY {self.key} {direction} LIMIT 1 OFFSET %s",
            [self.order[0], *params, size - 1],
        )
        rest = None
        if edge:
            last = bytes(edge[0][0])
            rest = _rest(bounds, last, descending)
            window = (last, high) if descending else (low, last + keys.SEPARATOR)
            low, high = window
        where, params = self._range_sql(f"p.{self.key}", low, high)
        exists = "".join(
            f" AND EXISTS (SELECT 1 FROM {self.terms} q WHERE q.term = %s "
            f"AND q.{self.key} = p.{self.key})"
            for _ in self.order[1:]
        )
        signature = " AND m.signature = %s" * len(causes)
        rows = sql.read(
            self.connection,
            f"SELECT p.{self.key}, m.value, m.signature FROM {self.terms} p "
            f"JOIN {self.rows} m ON m.{self.key} = p.{self.key} "
            f"WHERE p.term = %s AND {where}{exists}{signature} "
            f"ORDER BY p.{self.key} {direction}",
            [self.order[0], *params, *self.order[1:], *causes],
        )
        return rows, rest


def _checked(
    query: Query, rows: list[tuple[Any, ...]], reveal: bool, *, pending: bool = False
) -> Iterator[tuple[bytes, bytes]]:
    """The `(key, value)` of the candidate rows `(key, value, signature)` the query
    itself says match: in the messages as the user sees them (`reveal` False: with
    their redacted values masked, so no redacted value is ever what matched).
    `pending`: rows not indexed yet, whose cause is the one the indexer will give."""
    for raw_key, value, signature in rows:
        key = bytes(raw_key)
        wanted = query.reads_messages or (pending and signature is None and query.causes)
        msgs = _messages(value) if wanted else None
        if pending and signature is None and msgs:
            signature = index.cause_of(key, msgs)
        if msgs and not reveal:
            msgs = redaction.redacted_all(msgs, keys.queue_of(key), reveal=False)
        if query.matches(key, msgs, signature):
            yield key, bytes(value or b"")


def _messages(value: Any) -> list[Message] | None:
    with contextlib.suppress(codec.CodecError):
        return codec.decode(bytes(value or b""))
    return None


def iter_matching_rows(
    query: Query,
    *,
    queue: str | None,
    after_key: bytes | None = None,
    before_key: bytes | None = None,
    descending: bool = False,
    first_batch: int = _FIRST_BATCH,
    connection: BaseDatabaseWrapper | None = None,
    reveal: bool = True,
    spans: Sequence[Bounds] | None = None,
    budget: int | None = None,
) -> Iterator[tuple[bytes, bytes]]:
    """The `(key, stored value)` of the rows `query` matches, in `queue` (None: every
    queue), after `after_key` and before `before_key` (both exclusive), oldest first
    (newest first with `descending`). The pending rows of the range are indexed
    first. Candidates are read `first_batch` at a time, then twice as many each
    time. `reveal` False: matched in the messages with their redacted values masked
    (`queue.redaction`), for a user who may not see those values. `spans`: only in
    these sorted, disjoint key ranges `[low, high)` (high None: no end), each walked
    in turn; None: anywhere. `budget`: read at most that many candidates, then raise
    `SearchTooCostly` (None: no bound)."""
    connection = connection or sql.connection()
    scope = _scope(query, queue)
    bounds = scope and _narrow(scope, after_key, before_key)
    if bounds is None:
        return
    left = _Budget(budget)
    # A `queue.access.Spans` is walked by its few covering ranges, keeping its keys.
    keeps = getattr(spans, "keeps", None)
    for part in _ranges(bounds, getattr(spans, "covering", spans), descending):
        for found in _matching_in(connection, query, part, descending, first_batch, reveal, left):
            if keeps is None or keeps(found[0]):
                yield found


def _matching_in(
    connection: BaseDatabaseWrapper,
    query: Query,
    bounds: Bounds,
    descending: bool,
    first_batch: int,
    reveal: bool,
    budget: _Budget,
) -> Iterator[tuple[bytes, bytes]]:
    """The matching rows of one key range, in the order read."""
    # A pending row's cause may wait for the indexer too (a load's, an import's).
    direct_reads = bool(query.terms or query.causes)
    if direct_reads:
        index.index_pending(connection, low=bounds[0], high=bounds[1], limit=index.REQUEST_ROWS)
    walk = _Walk(connection, query, bounds)
    size = max(1, first_batch)
    left: Bounds | None = bounds
    while left is not None:
        window: Bounds | None = left
        pending: list[tuple[Any, ...]] = []
        if direct_reads:
            take = budget.take(size)
            pending = index.pending_rows(
                connection, low=left[0], high=left[1], limit=take, descending=descending
            )
            budget.spend(len(pending))
            if len(pending) == take:
                last = bytes(pending[-1][0])
                window = (last, left[1]) if descending else (left[0], last + keys.SEPARATOR)
                left = _rest(left, last, descending)
            else:
                left = None
        else:
            # The range read of a query without a term or cause reads every row.
            left = None
        direct = {bytes(row[0]) for row in pending}
        extra = list(_checked(query, pending, reveal, pending=True))
        while window is not None:
            take = budget.take(size)
            rows, window = walk.batch(window, descending, take)
            budget.spend(take if window is not None else len(rows))
            for key, value in _checked(query, rows, reveal):
                if key in direct:
                    continue
                while extra and (extra[0][0] > key if descending else extra[0][0] < key):
                    yield extra.pop(0)
                yield key, value
            size = min(size * 2, _MAX_BATCH)
        yield from extra


def matching_keys(
    query: Query,
    *,
    queue: str | None,
    after_key: bytes | None = None,
    until_key: bytes | None = None,
    limit: int = 500,
    connection: BaseDatabaseWrapper | None = None,
    reveal: bool = True,
) -> list[bytes]:
    """Up to `limit` matching keys after `after_key`, up to and including
    `until_key`, oldest first: a redrive's next batch from its cursor."""
    before = None if until_key is None else until_key + keys.SEPARATOR
    found: list[bytes] = []
    for key, _ in iter_matching_rows(
        query,
        queue=queue,
        after_key=after_key,
        before_key=before,
        first_batch=min(limit, _MAX_BATCH),
        connection=connection,
        reveal=reveal,
    ):
        found.append(key)
        if len(found) >= limit:
            break
    return found


@dataclass(frozen=True)
class Count:
    """How many rows a search matches, as far as its bound let it read: `capped`
    says it stopped there before the end, so at least `found` match (said "at least
    N", as an action on a capped selection says it; never a figure taken for all)."""

    found: int
    capped: bool = False

    def __int__(self) -> int:
        return self.found

    def __str__(self) -> str:
        return f"at least {self.found:,}" if self.capped else f"{self.found:,}"


def count_matching(
    query: Query,
    *,
    queue: str | None,
    until_key: bytes | None = None,
    connection: BaseDatabaseWrapper | None = None,
    reveal: bool = True,
    budget: int | None = None,
) -> Count:
    """How many rows `query` matches (up to and including `until_key`): a redrive's
    plan. A query on the key and cause only is counted by the database. `budget`:
    read at most that many candidates (`MAX_CANDIDATES`, a page's), and for at most a
    page's time, then answer a capped count instead of reading on (None: no bound)."""
    connection = connection or sql.connection()
    before = None if until_key is None else until_key + keys.SEPARATOR
    if query.reads_messages:
        found = 0
        matches = iter_matching_rows(
            query,
            queue=queue,
            before_key=before,
            connection=connection,
            reveal=reveal,
            budget=budget,
        )
        try:
            for _ in matches:
                found += 1
        except SearchTooCostly:
            return Count(found, capped=True)
        return Count(found)
    scope = _scope(query, queue)
    bounds = scope and _narrow(scope, None, before)
    if bounds is None:
        return Count(0)
    key = sql.key_column(connection)
    where = f"{key} >= %s" + ("" if bounds[1] is None else f" AND {key} < %s")
    params: list[Any] = [bounds[0]] if bounds[1] is None else [bounds[0], bounds[1]]
    for cause in query.causes:
        where += " AND signature = %s"
        params.append(cause.signature)
    table = sql.quoted(connection, sql.table())
    if budget is None:
        rows = sql.read(connection, f"SELECT COUNT(*) FROM {table} WHERE {where}", params)
        return Count(int(rows[0][0]))
    # Up to the budget's rows, one more telling whether it was reached.
    limited = f"SELECT 1 FROM {table} WHERE {where} LIMIT {int(budget) + 1}"
    found = int(sql.read(connection, f"SELECT COUNT(*) FROM ({limited}) t", params)[0][0])
    return Count(min(found, budget), capped=found > budget)


def keys_page(
    query: Query,
    *,
    queue: str | None,
    after_key: bytes | None = None,
    before_key: bytes | None = None,
    size: int,
    connection: BaseDatabaseWrapper | None = None,
    reveal: bool = True,
    spans: Sequence[Bounds] | None = None,
) -> tuple[list[bytes], bool]:
    """One page of matches, oldest first: after `after_key`, or the page just before
    `before_key`; and whether more match beyond it in the direction read. `spans`:
    only in those key ranges (`iter_matching_rows`). Reads at most `MAX_CANDIDATES`
    candidates (`SearchTooCostly` past that)."""
    descending = before_key is not None and after_key is None
    found: list[bytes] = []
    for key, _ in iter_matching_rows(
        query,
        queue=queue,
        after_key=after_key,
        before_key=before_key,
        descending=descending,
        first_batch=size + 1,
        connection=connection,
        reveal=reveal,
        spans=spans,
        budget=MAX_CANDIDATES,
    ):
        found.append(key)
        if len(found) > size:
            break
    more = len(found) > size
    found = found[:size]
    return (found[::-1] if descending else found), more
