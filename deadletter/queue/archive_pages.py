"""Pages of the archive for operators (the admin's Archived messages, the API's
`archive/`): newest first, a page at a time from a cursor, never counted.

A page is a range of the (queue, archived_at, id) index with a queue, of the
(archived_at, id) index without: the same few seeks at a thousand entries and at
a million. Reason, actor and a search (`queue.search`'s language, checked on the
decoded message: the archive has no search index) are not in those indexes, so a
page filtered by them looks through at most `WINDOW` entries of the range and
stops there, saying how far it looked: it may hold fewer entries than asked,
even none, and still have a next page that goes on where it stopped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator
from datetime import UTC, datetime

from django.db.models import Q, QuerySet

from deadletter.conf import conf
from deadletter.models import ArchivedMessage
from deadletter.queue import browse, redaction
from deadletter.queue.search import Query
from deadletter.wire import codec
from deadletter.wire.messages import Message

__all__ = ["WINDOW", "Cursor", "Filters", "Page", "page"]

WINDOW = 5000
"""Entries a filtered page looks through at most (one index range read)."""
SEARCH_SECONDS = 1.0
"""A search decodes entries for at most this long a page, within `WINDOW`."""
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
    `within`: a `Q` on the entry's key keeping the queues a user may view
    (`queue.access.Scope.queue_q(field="key")`); None: every queue. `reveal` False:
    the search looks at the messages with their redacted values masked."""

    queue: str | None = None
    reason: str | None = None
    actor: str | None = None
    query: Query | None = None
    within: Q | None = None
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


def scope(filters: Filters) -> QuerySet[ArchivedMessage]:
    """The entries the indexed filter (the queue) and the user's scope leave, unordered."""
    rows = ArchivedMessage.objects.using(conf.DATABASE).all()
    if filters.within is not None:
        rows = rows.filter(filters.within)
    return rows if filters.queue is None else rows.filter(queue=filters.queue)


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
    return _searched(candidates, filters.query, size, stop, filters.reveal)


def _searched(
    candidates: QuerySet[ArchivedMessage],
    query: Query,
    size: int,
    edge: Cursor | None,
    reveal: bool,
) -> Page:
    """The first `size` candidates whose decoded message `query` matches, read in
    batches, for at most `SEARCH_SECONDS`."""
    deadline = time.monotonic() + SEARCH_SECONDS
    found: list[ArchivedMessage] = []
    looked = 0
    last: Cursor | None = None
    for entry in _batches(candidates):
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


def _batches(rows: QuerySet[ArchivedMessage]) -> Iterator[ArchivedMessage]:
    after: Cursor | None = None
    while True:
        batch = list((rows if after is None else _older_than(rows, after))[:_BATCH])
        yield from batch
        if len(batch) < _BATCH:
            return
        after = Cursor.of(batch[-1])


def _messages(entry: ArchivedMessage) -> list[Message] | None:
    """The entry's messages; None for a value that does not decode or is too large
    to (`browse.is_too_large`), which only a search without words matches."""
    value = bytes(entry.value or b"")
    if browse.is_too_large(bytes(entry.key), len(value)):
        return None
    with contextlib.suppress(codec.CodecError):
        return codec.decode(value)
    return None
