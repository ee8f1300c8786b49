"""Who may act on which queue: the `QueueAccess` rows of a user and their groups.

Once a project has any `QueueAccess` row, a user who is not a superuser sees
and acts on only the queues a row of theirs (their own or a group's) grants;
with none, every user is unrestricted here and the model permissions alone
apply. The model permission is always checked on top, by the caller.

Rules add up: an action is granted on a queue when some rule whose pattern
matches the queue grants it, and the queue is also granted `view` by some
rule (a message one cannot see is one one cannot act on: it is a 404).
A pattern is `fnmatch.fnmatchcase`-style. For querysets a pattern becomes key
ranges of `QueuedMessage.key`: a literal name the queue's range, a literal
prefix followed by one trailing `*` the range of every name with that prefix,
any other pattern the ranges of the queue names that exist and match it
(the first `RESOLVE_LIMIT` names walked; beyond that a queue is allowed by
`allows` but not listed by `queue_q`).
"""

from __future__ import annotations

import fnmatch
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

from django.db.models import BooleanField, Case, Q, Subquery, Value, When

from deadletter.models import QueueAccess
from deadletter.queue.api import walk_queue_names
from deadletter.store import scans, sql
from deadletter.wire import keys

__all__ = ["ACTIONS", "RESOLVE_LIMIT", "Scope", "can", "may_change_rules", "scope_of"]

ACTIONS = ("view", "retry", "edit", "delete", "redrive")
# The most queue names a pattern that is neither a name nor a prefix is
# resolved against, per pattern and scope.
RESOLVE_LIMIT = 10_000
_WALK_PAGE = 1_000
_WILDCARDS = frozenset("*?[")

# A key interval [low, high); high None: no upper bound.
_Interval = tuple[bytes, bytes | None]


class Scope:
    """What one user may do on which queue, read once (see `scope_of`)."""

    __slots__ = ("_patterns", "_intervals", "unrestricted")

    def __init__(self, grants: Iterable[tuple[str, Sequence[str]]] = (), *, unrestricted: bool):
        """`grants`: `(pattern, actions)` pairs, one per rule."""
        self.unrestricted = unrestricted
        self._patterns: dict[str, set[str]] = {action: set() for action in ACTIONS}
        for pattern, actions in grants:
            for action in actions:
                self._patterns[_checked(action)].add(pattern)
        self._intervals: dict[str, list[_Interval]] = {}

    @classmethod
    def everything(cls) -> Scope:
        return cls(unrestricted=True)

    def __repr__(self) -> str:
        if self.unrestricted:
            return "Scope(unrestricted)"
        granted = {a: sorted(p) for a, p in self._patterns.items() if p}
        return f"Scope({granted})"

    def _granted(self, queue: str, action: str) -> bool:
        return any(fnmatch.fnmatchcase(queue, p) for p in self._patterns[action])

    def allows(self, queue: str, action: str = "view") -> bool:
        """Whether `action` is granted on `queue` (and `view` with it)."""
        _checked(action)
        if self.unrestricted:
            return True
        return self._granted(queue, "view") and (action == "view" or self._granted(queue, action))

    def names_filter(self, names: Iterable[str], action: str = "view") -> list[str]:
        """The names of `names` on which `action` is allowed, in their order."""
        return [name for name in names if self.allows(name, action)]

    def queue_q(self, action: str = "view", *, field: str = "key") -> Q:
        """A `Q` on the key column `field` (`QueuedMessage.key`; `ArchivedMessage.key`
        too) keeping the rows of the queues where `action` is allowed: `Q()` when
        unrestricted, one that is never true when nothing is."""
        _checked(action)
        if self.unrestricted:
            return Q()
        intervals = self.intervals(action)
        if not intervals:
            return Q(pk__in=[])
        combined = Q()
        for low, high in intervals:
            part = Q(**{f"{field}__gte": low})
            if high is not None:
                part &= Q(**{f"{field}__lt": high})
            combined |= part
        return combined

    def intervals(self, action: str = "view") -> list[_Interval]:
        """The sorted, disjoint key intervals `queue_q` is made of (not for an
        unrestricted scope, which has no limit)."""
        found = self._intervals.get(action)
        if found is None:
            found = self._ranges("view")
            if action != "view":
                found = _intersect(found, self._ranges(action))
            self._intervals[action] = found
        return found

    def spans(self, action: str = "view") -> list[_Interval] | None:
        """`intervals`, or None for an unrestricted scope: the key ranges a page or a
        search of the user's is kept to (`search.keys_page(spans=...)`)."""
        _checked(action)
        return None if self.unrestricted else self.intervals(action)

    def granted_names(
        self,
        limit: int,
        *,
        after: str | None = None,
        before: str | None = None,
        action: str = "view",
    ) -> list[str]:
        """Up to `limit` names of queues holding a row on which `action` is allowed,
        nearest first: sorting after `after` (from the first when None), or with
        `before` the last ones before it (nearest first, so descending). A walk of
        the granted key ranges only: one statement a range at least, however many
        other queues there are. `ValueError` for an invalid name."""
        if before is not None:
            bound: bytes | None = keys.encode_queue_name(before)
        else:
            bound = None if after is None else keys.encode_queue_name(after) + b"\x01"
        if self.unrestricted:
            spans: list[_Interval] = [(b"", None)]
        else:
            spans = self.intervals(action)
        connection = sql.connection()
        if before is not None:
            return _walk_down(connection, spans, bound, limit)
        return _walk_up(connection, spans, bound, limit)

    def _ranges(self, action: str) -> list[_Interval]:
        cached = self._intervals.get(f"granted:{action}")
        if cached is None:
            spans: list[_Interval] = []
            for pattern in self._patterns[action]:
                spans.extend(_pattern_intervals(pattern))
            cached = _merge(spans)
            self._intervals[f"granted:{action}"] = cached
        return cached


def _checked(action: str) -> str:
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; one of {', '.join(ACTIONS)}")
    return action


def literal_prefix(pattern: str) -> str:
    """The part of `pattern` before its first wildcard."""
    for i, char in enumerate(pattern):
        if char in _WILDCARDS:
            return pattern[:i]
    return pattern


def _prefix_interval(prefix: str) -> _Interval | None:
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


def _pattern_intervals(pattern: str) -> list[_Interval]:
    prefix = literal_prefix(pattern)
    if prefix == pattern:
        try:
            return [keys.queue_bounds(pattern)]
        except ValueError:
            return []
    if pattern[len(prefix) :].strip("*") == "":
        span = _prefix_interval(prefix)
        return [] if span is None else [span]
    return [keys.queue_bounds(name) for name in _resolve(pattern, prefix)]


def _resolve(pattern: str, prefix: str) -> list[str]:
    """The queue names that exist and match `pattern`, walked from `prefix`."""
    span = _prefix_interval(prefix)
    if span is None:
        return []
    high = span[1]
    found: list[str] = []
    start: str | None = prefix or None
    include = True
    walked = 0
    while walked < RESOLVE_LIMIT:
        page = walk_queue_names(
            start, min(_WALK_PAGE, RESOLVE_LIMIT - walked), include_start=include
        )
        for name in page:
            if high is not None and name.encode("utf-8") >= high:
                return found
            if fnmatch.fnmatchcase(name, pattern):
                found.append(name)
        walked += len(page)
        if len(page) < _WALK_PAGE:
            break
        start, include = page[-1], False
    return found


def _merge(spans: list[_Interval]) -> list[_Interval]:
    merged: list[_Interval] = []
    for low, high in sorted(spans, key=lambda span: span[0]):
        if merged:
            last_low, last_high = merged[-1]
            if last_high is None or low <= last_high:
                if last_high is not None and (high is None or high > last_high):
                    merged[-1] = (last_low, high)
                continue
        merged.append((low, high))
    return merged


def _intersect(left: list[_Interval], right: list[_Interval]) -> list[_Interval]:
    out: list[_Interval] = []
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


def _walk_up(connection: Any, spans: list[_Interval], bound: bytes | None, limit: int) -> list[str]:
    found: list[str] = []
    for low, high in spans:
        if bound is not None and high is not None and high <= bound:
            continue
        cursor = low if bound is None else max(low, bound)
        while len(found) < limit:
            want = min(limit - len(found), _WALK_PAGE)
            page = scans.queue_keys(connection, cursor, descending=False, limit=want)
            inside = [key for key in page if high is None or key < high]
            found.extend(keys.queue_of(key) for key in inside)
            if len(inside) < len(page):
                break
            if len(page) < want:
                return found
            cursor = keys.prefix_of(page[-1]) + b"\x01"
    return found


def _walk_down(
    connection: Any, spans: list[_Interval], bound: bytes | None, limit: int
) -> list[str]:
    found: list[str] = []
    for low, high in reversed(spans):
        if bound is not None and low >= bound:
            continue
        cursor = bound if high is None else high if bound is None else min(high, bound)
        while len(found) < limit:
            want = min(limit - len(found), _WALK_PAGE)
            page = scans.queue_keys(connection, cursor, descending=True, limit=want)
            inside = [key for key in page if key >= low]
            found.extend(keys.queue_of(key) for key in inside)
            if len(inside) < len(page):
                break
            if len(page) < want:
                return found
            cursor = keys.prefix_of(page[-1])
    return found


def _read_scope(user: Any) -> Scope:
    """One statement: the user's rows and, to tell "no row at all", the first row."""
    if user is not None and getattr(user, "is_active", False) and user.is_superuser:
        return Scope.everything()
    if user is None or not user.is_authenticated:
        if QueueAccess.objects.exists():
            return Scope(unrestricted=False)
        return Scope.everything()
    mine = Q(user_id=user.pk) | Q(group_id__in=user.groups.values("id"))
    first = QueueAccess.objects.order_by("id").values("id")[:1]
    rows = (
        QueueAccess.objects.filter(mine | Q(id=Subquery(first)))
        .annotate(
            held=Case(
                When(mine, then=Value(True)), default=Value(False), output_field=BooleanField()
            )
        )
        .values_list("held", "queues", *ACTIONS)
    )
    found = list(rows)
    if not found:
        return Scope.everything()
    grants = [
        (row[1], [action for action, on in zip(ACTIONS, row[2:], strict=True) if on])
        for row in found
        if row[0]
    ]
    return Scope(grants, unrestricted=False)


# Memoised per user object (identity, not the pk's equality): a request loads
# its user afresh, so rules changed between requests are seen by the next one.
_memo: dict[int, tuple[weakref.ref[Any], Scope]] = {}


def scope_of(user: Any) -> Scope:
    """The scope of `user` (a user, `AnonymousUser` or None): unrestricted for an
    active superuser (no statement) or when no `QueueAccess` row exists; else the
    rules of the user and their groups. One statement, once per user object."""
    if user is None:
        return _read_scope(None)
    held = _memo.get(id(user))
    if held is not None and held[0]() is user:
        return held[1]
    scope = _read_scope(user)
    try:
        ref = weakref.ref(user)
    except TypeError:
        return scope
    ident = id(user)
    _memo[ident] = (ref, scope)
    weakref.finalize(user, _memo.pop, ident, None)
    return scope


def forget(user: Any) -> None:
    """Drop the memoised scope of `user` (after changing its rules in-process)."""
    _memo.pop(id(user), None)


def can(user: Any, action: str, queue: str) -> bool:
    """Whether `user`'s scope allows `action` on `queue` (not the model permission)."""
    return scope_of(user).allows(queue, action)


def may_change_rules(user: Any) -> bool:
    """Whether `user` may add, change or delete `QueueAccess` rules (the model
    permission is checked on top): only an unrestricted user, an active superuser
    or anyone while no rule exists. A user whom a rule restricts could otherwise
    write `* / every action` for himself: a rule can never widen its writer's scope
    nor anyone's, because no restricted user writes one."""
    return scope_of(user).unrestricted
