"""Pages of the archive for operators (the admin's Archived messages, the API's
`archive/`): newest first, a page at a time from a cursor, never counted.

A page is a range of the (queue, archived_at, id) index with a queue, of the
(archived_at, id) index without: the same few seeks at a thousand entries and at
a million. Reason, actor and a search (`queue.search`'s language, checked on the
decoded message: the archive has no search index) are not in those indexes, so a
page filtered by them looks through at most `WINDOW` entries of the range and
stops there, saying how far it looked: it may hold fewer entries than asked,
even none, and still have a next page that goes on where it stopped.

A user kept to some queues (`queue.access`) sees the entries of the key ranges
their scope grants. Without a queue filter, their entries come from a merge of
each granted queue's range of the (queue, archived_at, id) index (the queues
found by one seek each of the (key, id) index within the granted ranges): an
unfiltered page is full whenever that many granted entries follow the cursor,
however many entries of other queues lie between, and a filtered page looks
through at most `WINDOW` of their entries (each queue its share; one that stops
there counts them, within the window), never other queues'. Past `MERGED_QUEUES`
granted queues with entries, the database filters the (archived_at, id) index
by the granted ranges instead: the same entries, at a cost that grows with the
archive.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import itertools
import time
from collections.abc import Iterator
from datetime import UTC, datetime

from django.db.models import Q, QuerySet

from deadletter.conf import conf
from deadletter.models import ArchivedMessage
from deadletter.queue import browse, redaction
from deadletter.queue.access import Scope, Spans
from deadletter.queue.search import Query
from deadletter.wire import codec, keys
from deadletter.wire.messages import Message

__all__ = ["MERGED_QUEUES", "WINDOW", "Cursor", "Filters", "Page", "page"]

WINDOW = 5000
"""Entries a filtered page looks through at most (one index range read)."""
SEARCH_SECONDS = 1.0
"""A search decodes entries for at most this long a page, within `WINDOW`."""
MERGED_QUEUES = 50
"""Granted queues a restricted page merges at most: a seek or two each a page."""
WALKED_QUEUES = 2 * MERGED_QUEUES
"""Queues with entries a restricted page looks at, at most, to find the granted ones
among those of a pattern's prefix (`*-billing`: every queue): past that the
database filters the archive's time index by the scope instead."""
_BATCH = 500


@dataclasses.dataclass(frozen=True, slots=True)
class Cursor:
    """A place in the archive's order: the entry `id`, archived at `at`. Its text
    (`<microseconds since the epoch>-<id>`) travels in URLs."""

    at: datetime
    id: int

    def __str__(self) -> str:
        delta = self.at - datetime(1970, 1, 1, tzinfo=UTC)
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        return f"{micros}-{self.id}"

    @classmethod
    def parse(cls, text: str) -> Cursor:
        """The cursor `text` names; `ValueError` saying what it should be."""
        micros, dash, ident = text.partition("-")
        if not (dash and micros.isdigit() and ident.isdigit()) or len(text) > 40:
            raise ValueError("not a cursor of the archive: <microseconds>-<id>, as `next` gives")
        try:
            at = datetime.fromtimestamp(int(micros) // 1_000_000, tz=UTC).replace(
                microsecond=int(micros) % 1_000_000
            )
        except (OverflowError, OSError, ValueError):
            raise ValueError("the cursor's time is out of range") from None
        return cls(at, int(ident))

    @classmethod
    def of(cls, entry: ArchivedMessage) -> Cursor:
        return cls(entry.archived_at, entry.id)


@dataclasses.dataclass(frozen=True, slots=True)
class Filters:
    """What a page shows: entries of `queue` (indexed), of `reason`, by `actor`,
    matching `query` (each looked for within `WINDOW`); None / empty: any.
    `within`: the user's scope (`queue.access.scope_of`): the entries of the queues it
    lets them view; None (or an unrestricted scope): every queue. `reveal` False: the
    search looks at the messages with their redacted values masked."""

    queue: str | None = None
    reason: str | None = None
    actor: str | None = None
    query: Query | None = None
    within: Scope | None = None
    reveal: bool = True

    @property
    def windowed(self) -> bool:
        return bool(self.reason or self.actor is not None or self.query)


@dataclasses.dataclass(frozen=True, slots=True)
class Page:
    """Up to `size` entries newest first; `next` the cursor of the next page (None on
    the last). `looked` counts the entries a filtered page looked through and
    `stopped` says it stopped at `WINDOW` (or the search's time) before the page
    filled: the next page goes on from there."""

    entries: list[ArchivedMessage]
    next: Cursor | None
    looked: int = 0
    stopped: bool = False


def newest_first(rows: QuerySet[ArchivedMessage]) -> QuerySet[ArchivedMessage]:
    return rows.order_by("-archived_at", "-id")


def _older_than(rows: QuerySet[ArchivedMessage], cursor: Cursor) -> QuerySet[ArchivedMessage]:
    """The entries after `cursor` in the order, as an index range (`archived_at <=`)
    and a check of the few entries archived in the same microsecond."""
    return rows.filter(
        Q(archived_at__lt=cursor.at) | Q(archived_at=cursor.at, id__lt=cursor.id),
        archived_at__lte=cursor.at,
    )


def _not_older_than(rows: QuerySet[ArchivedMessage], cursor: Cursor) -> QuerySet[ArchivedMessage]:
    return rows.filter(
        Q(archived_at__gt=cursor.at) | Q(archived_at=cursor.at, id__gte=cursor.id),
        archived_at__gte=cursor.at,
    )


def _entries() -> QuerySet[ArchivedMessage]:
    return ArchivedMessage.objects.using(conf.DATABASE).all()


def scope(filters: Filters) -> QuerySet[ArchivedMessage]:
    """The entries the indexed filter (the queue) and the user's scope leave, unordered:
    a queue the scope does not let them view leaves none."""
    rows = _entries()
    if filters.queue is not None:
        if filters.within is not None and not filters.within.allows(filters.queue):
            return rows.none()
        return rows.filter(queue=filters.queue)
    if filters.within is not None:
        rows = rows.filter(filters.within.queue_q("view"))
    return rows


def narrowed(rows: QuerySet[ArchivedMessage], filters: Filters) -> QuerySet[ArchivedMessage]:
    """`rows` narrowed by the filters the database checks itself (reason, actor, and
    the search's cause and key prefix, on the entry's own columns)."""
    if filters.reason:
        rows = rows.filter(reason=filters.reason)
    if filters.actor is not None:
        rows = rows.filter(actor=filters.actor)
    if filters.query is not None:
        for cause in filters.query.causes:
            rows = rows.filter(signature=cause.signature)
        for prefix in filters.query.prefixes:
            low, high = prefix.bounds()
            rows = (
                rows.filter(key__gte=low)
                if high is None
                else rows.filter(key__gte=low, key__lt=high)
            )
    return rows


def page(filters: Filters, cursor: Cursor | None = None, size: int = 50) -> Page:
    """The page of `size` entries after `cursor` (from the newest when None); none
    for a queue, reason or actor holding NUL (no entry does: PostgreSQL's text
    refuses it)."""
    if any("\x00" in (text or "") for text in (filters.queue, filters.reason, filters.actor)):
        return Page([], None)
    names = _merged_queues(filters)
    if names is not None:
        return _merged_page(names, filters, cursor, size)
    rows = scope(filters)
    if cursor is not None:
        rows = _older_than(rows, cursor)
    ordered = newest_first(rows)
    if not filters.windowed:
        found = list(ordered[: size + 1])
        more = len(found) > size
        return Page(found[:size], Cursor.of(found[size - 1]) if more else None)
    edge = ordered.values_list("archived_at", "id")[WINDOW - 1 : WINDOW].first()
    window = ordered if edge is None else _not_older_than(ordered, Cursor(*edge))
    candidates = newest_first(narrowed(window, filters))
    if filters.query is None or not filters.query.conditions:
        found = list(candidates[: size + 1])
        looked = WINDOW if edge is not None else 0
        if len(found) > size:
            return Page(found[:size], Cursor.of(found[size - 1]), looked)
        return Page(found, None if edge is None else Cursor(*edge), looked, edge is not None)
    stop = None if edge is None else Cursor(*edge)
    return _searched(_batches(candidates), filters.query, size, stop, filters.reveal)


def _merged_queues(filters: Filters) -> list[str] | None:
    """The granted queues whose index ranges a restricted page without a queue filter
    merges; None for any other page, or past `MERGED_QUEUES` such queues (or
    `WALKED_QUEUES` queues with entries looked at to find them)."""
    spans = None if filters.within is None else filters.within.spans()
    if spans is None or filters.queue is not None:
        return None
    return _queues_in(spans, MERGED_QUEUES)


def _queues_in(spans: Spans, limit: int) -> list[str] | None:
    """The granted queues with entries in `spans`, in key order; None past `limit`
    of them, or past `WALKED_QUEUES` queues with entries in its covering ranges."""
    names: list[str] = []
    for walked, (name, kept) in enumerate(_names_in(spans), start=1):
        if walked > WALKED_QUEUES:
            return None
        if kept:
            names.append(name)
            if len(names) > limit:
                return None
    return names


def _names_in(spans: Spans) -> Iterator[tuple[str, bool]]:
    """Each queue with entries in the covering ranges of `spans` and whether it is
    granted: one seek of the (key, id) index a queue and one a range; none for a
    range that is one queue's (`keys.queue_bounds`), whose name it is."""
    by_key = _entries().order_by("key").values_list("key", flat=True)
    for low, high in spans.covering:
        if spans.exact and high == low + b"\x01" and keys.SEPARATOR not in low:
            yield keys.queue_of(low), True
            continue
        start = low
        while True:
            rows = by_key.filter(key__gte=start)
            found = (rows if high is None else rows.filter(key__lt=high)).first()
            if found is None:
                break
            prefix = keys.prefix_of(bytes(found))
            yield keys.queue_of(prefix), spans.keeps(prefix)
            start = prefix + b"\x01"


def _merged_page(names: list[str], filters: Filters, cursor: Cursor | None, size: int) -> Page:
    """The page of the entries of the queues `names`: each queue's range of the
    (queue, archived_at, id) index after `cursor`, merged newest first. Filtered, each
    queue looks through its next `WINDOW / len(names)` entries at most, back to the
    newest place where one of them stops (the edge): never more than `WINDOW`
    entries in all, and none of another queue."""
    ranges: list[QuerySet[ArchivedMessage]] = []
    for name in names:
        rows = _entries().filter(queue=name)
        ranges.append(rows if cursor is None else _older_than(rows, cursor))
    if not filters.windowed:
        found = list(itertools.islice(_merged_entries(ranges, size + 1), size + 1))
        more = len(found) > size
        return Page(found[:size], Cursor.of(found[size - 1]) if more else None)
    share = -(-WINDOW // max(1, len(names)))
    stops = [
        Cursor(*stop)
        for rows in ranges
        if (stop := newest_first(rows).values_list("archived_at", "id")[share - 1 : share].first())
    ]
    edge = max(stops, key=lambda stop: (stop.at, stop.id), default=None)
    if edge is not None:
        ranges = [_not_older_than(rows, edge) for rows in ranges]
    candidates = _merged_entries([narrowed(rows, filters) for rows in ranges], size + 1)
    if filters.query is not None and filters.query.conditions:
        return _searched(candidates, filters.query, size, edge, filters.reveal)
    found = list(itertools.islice(candidates, size + 1))
    if len(found) > size:
        return Page(found[:size], Cursor.of(found[size - 1]), 0)
    if edge is None:
        return Page(found, None)
    looked = sum(rows[:share].count() for rows in ranges)
    return Page(found, edge, looked, True)


def _merged_entries(
    ranges: list[QuerySet[ArchivedMessage]], first: int
) -> Iterator[ArchivedMessage]:
    """The entries of `ranges` merged newest first, each range read `first` entries at
    a time, then more (`_batches`)."""
    streams = [_batches(newest_first(rows), first) for rows in ranges]
    return heapq.merge(*streams, key=lambda entry: (entry.archived_at, entry.id), reverse=True)


def _searched(
    candidates: Iterator[ArchivedMessage],
    query: Query,
    size: int,
    edge: Cursor | None,
    reveal: bool,
) -> Page:
    """The first `size` candidates (newest first) whose decoded message `query`
    matches, for at most `SEARCH_SECONDS`."""
    deadline = time.monotonic() + SEARCH_SECONDS
    found: list[ArchivedMessage] = []
    looked = 0
    last: Cursor | None = None
    for entry in candidates:
        looked += 1
        last = Cursor.of(entry)
        msgs = _messages(entry)
        if msgs and not reveal:
            msgs = redaction.redacted_all(msgs, entry.queue, reveal=False)
        if query.matches(bytes(entry.key), msgs, entry.signature):
            if len(found) == size:
                return Page(found, Cursor.of(found[-1]), looked)
            found.append(entry)
        if time.monotonic() >= deadline:
            return Page(found, last, looked, True)
    return Page(found, edge, looked, edge is not None)


def _batches(rows: QuerySet[ArchivedMessage], first: int = _BATCH) -> Iterator[ArchivedMessage]:
    """`rows` (newest first) read `first` at a time, twice as many each time after,
    up to `_BATCH`."""
    after: Cursor | None = None
    size = min(first, _BATCH)
    while True:
        batch = list((rows if after is None else _older_than(rows, after))[:size])
        yield from batch
        if len(batch) < size:
            return
        after = Cursor.of(batch[-1])
        size = min(size * 2, _BATCH)


def _messages(entry: ArchivedMessage) -> list[Message] | None:
    """The entry's messages; None for a value that does not decode or is too large
    to (`browse.is_too_large`), which only a search without words matches."""
    value = bytes(entry.value or b"")
    if browse.is_too_large(bytes(entry.key), len(value)):
        return None
    with contextlib.suppress(codec.CodecError):
        return codec.decode(value)
    return None
