"""Where granted queues lie in the key space: a `QueueAccess` pattern's key range,
the arithmetic of sorted key intervals, and the walk of the queue names within
one, a bounded statement a page.

A queue is the key range `[name 0x00, name 0x01)`, so a literal name or a literal
prefix followed by `*` is one range, and any other pattern the range of its
literal prefix with the pattern tested on each name in it (`queue.access`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from django.db.models import Q

from deadletter.queue.access_patterns import Pattern, compiled
from deadletter.store import scans, sql
from deadletter.wire import keys

__all__ = [
    "Interval",
    "clipped",
    "inside",
    "intersect",
    "literal_prefix",
    "merge",
    "names_between",
    "pattern_parts",
    "ranges_q",
]

# A key interval [low, high); high None: no upper bound.
Interval = tuple[bytes, bytes | None]

# Queue names walked a statement: at most this many (`names_between`).
_WALK_PAGE = 1_000
_WILDCARDS = frozenset("*?[")


def ranges_q(spans: Iterable[Interval], field: str) -> Q:
    combined: Q | None = None
    for low, high in spans:
        part = Q(**{f"{field}__gte": low})
        if high is not None:
            part &= Q(**{f"{field}__lt": high})
        combined = part if combined is None else combined | part
    return Q(pk__in=[]) if combined is None else combined


def inside(low: bytes, high: bytes | None, spans: list[Interval]) -> bool:
    """Whether `[low, high)` lies within one of `spans`."""
    for s_low, s_high in spans:
        if s_low <= low and (s_high is None or (high is not None and high <= s_high)):
            return True
    return False


def clipped(spans: list[Interval], bound: bytes | None, descending: bool) -> Iterator[Interval]:
    """`spans` in the order read, cut to what lies after `bound` (before it, descending)."""
    for low, high in reversed(spans) if descending else spans:
        if bound is None:
            yield low, high
        elif descending:
            if low < bound:
                yield low, bound if high is None else min(high, bound)
        elif high is None or high > bound:
            yield max(low, bound), high


def names_between(low: bytes, high: bytes | None, descending: bool, *, first: int) -> Iterator[str]:
    """The names of the queues holding a row in `[low, high)`, nearest first: one
    statement of index seeks a page of names, `first` names, then twice as many
    each time up to `_WALK_PAGE`."""
    connection = sql.connection()
    want = max(1, min(first, _WALK_PAGE))
    cursor: bytes | None = high if descending else low
    while True:
        page = _queue_keys(connection, cursor, descending, want, (low, high))
        for key in page:
            if (key < low) if descending else (high is not None and key >= high):
                return
            yield keys.queue_of(key)
        if len(page) < want:
            return
        cursor = keys.prefix_of(page[-1]) if descending else keys.prefix_of(page[-1]) + b"\x01"
        want = min(want * 2, _WALK_PAGE)


def literal_prefix(pattern: str) -> str:
    """The part of `pattern` before its first wildcard."""
    for i, char in enumerate(pattern):
        if char in _WILDCARDS:
            return pattern[:i]
    return pattern


def _prefix_interval(prefix: str) -> Interval | None:
    """Every key whose queue name starts with `prefix`: `[prefix, prefix + 1)`
    (a key is `name 0x00 ...` and a name holds no NUL, so a key starts with
    `prefix` exactly when its name does)."""
    if not prefix:
        return b"", None
    if "\x00" in prefix:
        return None
    try:
        raw = prefix.encode("utf-8")
    except UnicodeEncodeError:
        return None
    stripped = raw.rstrip(b"\xff")
    if not stripped:
        return raw, None
    return raw, stripped[:-1] + bytes([stripped[-1] + 1])


def pattern_parts(pattern: str) -> tuple[Interval | None, Pattern | None]:
    """A pattern's key range and, for one that is neither a name nor a prefix
    followed by `*`, the parsed pattern each queue name in that range is tested
    with (None, None: it grants nothing)."""
    prefix = literal_prefix(pattern)
    if prefix == pattern:
        try:
            return keys.queue_bounds(pattern), None
        except ValueError:
            return None, None
    span = _prefix_interval(prefix)
    if pattern[len(prefix) :].strip("*") == "" or span is None:
        return span, None
    parsed = compiled(pattern)
    return (span, parsed) if parsed.parts is not None else (None, None)


def merge(spans: list[Interval]) -> list[Interval]:
    merged: list[Interval] = []
    for low, high in sorted(spans, key=lambda span: span[0]):
        if merged:
            last_low, last_high = merged[-1]
            if last_high is None or low <= last_high:
                if last_high is not None and (high is None or high > last_high):
                    merged[-1] = (last_low, high)
                continue
        merged.append((low, high))
    return merged


def intersect(left: list[Interval], right: list[Interval]) -> list[Interval]:
    out: list[Interval] = []
    i = j = 0
    while i < len(left) and j < len(right):
        low = max(left[i][0], right[j][0])
        lh, rh = left[i][1], right[j][1]
        high = rh if lh is None else lh if rh is None else min(lh, rh)
        if high is None or low < high:
            out.append((low, high))
        if rh is None or (lh is not None and lh <= rh):
            i += 1
        else:
            j += 1
    return out


def _queue_keys(
    connection: Any, bound: bytes | None, descending: bool, limit: int, within: Interval
) -> list[bytes]:
    """`scans.queue_keys`, but one seek a statement on MySQL/MariaDB, whose plan of
    the recursive walk's correlated seek reads the index from its start (12 s for a
    bound half-way through 1,000,000 rows, where one seek takes a millisecond),
    stopping at the first key outside `within`."""
    if connection.vendor != "mysql":
        return scans.queue_keys(connection, bound, descending=descending, limit=limit)
    key, table = sql.key_column(connection), sql.quoted(connection, sql.table())
    found: list[bytes] = []
    while len(found) < limit:
        where = "" if bound is None else f" WHERE {key} {'<' if descending else '>='} %s"
        order = "DESC" if descending else "ASC"
        statement = f"SELECT {key} FROM {table}{where} ORDER BY {key} {order} LIMIT 1"
        rows = sql.read(connection, statement, () if bound is None else (bound,))
        if not rows:
            break
        found.append(bytes(rows[0][0]))
        low, high = within
        if found[-1] < low or (high is not None and found[-1] >= high):
            break
        bound = keys.prefix_of(found[-1]) + (b"" if descending else b"\x01")
    return found
