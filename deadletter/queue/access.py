"""Who may act on which queue: the `QueueAccess` rows of a user and their groups,
read once into a `Scope`, and the one decision every edge asks (`require`).

Once a project has any `QueueAccess` row, a user who is not a superuser sees
and acts on only the queues a row of theirs (their own or a group's) grants;
with none, every user is unrestricted here and the model permissions alone
apply. The model permission is always checked on top, by the caller.

Rules add up: an action is granted on a queue when some rule whose pattern
matches the queue grants it, and the queue is also granted `view` by some
rule (a message one cannot see is one one cannot act on: it is `Hidden`, a 404;
an action not granted on a queue one sees is `Forbidden`, a 403). A pattern is
`fnmatch.fnmatchcase`-style (`access_patterns`). Any rule costs what a prefix
costs (`access_ranges`): a literal name is the queue's key range, a literal
prefix followed by one trailing `*` the range of every name with that prefix,
and any other pattern the range of its literal prefix (everything for
`*-billing`) with the pattern tested on each row's queue name, one condition of
fixed size in SQL (`queue_q`), never a list of the queues it matches. Pages read
the queues a pattern matches in turn, walking the queue names of its prefix's
range a page at a time (`Spans`, `granted_names`), each statement bounded.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from django.db.models import BooleanField, Case, F, Q, QuerySet, Subquery, Value, When

from deadletter.exceptions import DeadletterError
from deadletter.models import QueueAccess
from deadletter.models.access import ACTIONS
from deadletter.queue.access_patterns import Pattern, QueueNameMatches, compiled
from deadletter.queue.access_ranges import (
    Interval,
    clipped,
    inside,
    intersect,
    merge,
    names_between,
    pattern_parts,
    ranges_q,
)
from deadletter.wire import keys

__all__ = [
    "ACTIONS",
    "RESOLVE_LIMIT",
    "Denied",
    "Hidden",
    "Forbidden",
    "Scope",
    "Spans",
    "can",
    "may_change_rules",
    "require",
    "scope_of",
]

# The most queue names a list filter walks to offer a restricted user's choices.
RESOLVE_LIMIT = 10_000
# Queue names a page's walk reads first (a page of rows needs few queues); then
# twice as many each time (`access_ranges.names_between`).
_FIRST_WALK = 32
# Key ranges counted a statement (`Scope.count`), and the most rows it tests one
# by one against a pattern instead.
_COUNTED_RANGES = 64
_TESTED_ROWS = 20_000


class Scope:
    """What one user may do on which queue, read once (see `scope_of`)."""

    __slots__ = ("_patterns", "_cache", "unrestricted")

    def __init__(self, grants: Iterable[tuple[str, Sequence[str]]] = (), *, unrestricted: bool):
        """`grants`: `(pattern, actions)` pairs, one per rule."""
        self.unrestricted = unrestricted
        self._patterns: dict[str, set[str]] = {action: set() for action in ACTIONS}
        for pattern, actions in grants:
            for action in actions:
                self._patterns[_checked(action)].add(pattern)
        self._cache: dict[str, Any] = {}

    @classmethod
    def everything(cls) -> Scope:
        return cls(unrestricted=True)

    def __repr__(self) -> str:
        if self.unrestricted:
            return "Scope(unrestricted)"
        granted = {a: sorted(p) for a, p in self._patterns.items() if p}
        return f"Scope({granted})"

    def _granted(self, queue: str, action: str) -> bool:
        return any(compiled(p).matches(queue) for p in self._patterns[action])

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
        unrestricted, one that is never true when nothing is. Its size grows with
        the rules, never with the queues they match: a pattern that is not a name
        nor a prefix is its prefix's range and a test of each row's queue name."""
        _checked(action)
        if self.unrestricted:
            return Q()
        if self.is_exact(action):
            return ranges_q(self.intervals(action), field)
        found = self._pattern_q("view", field)
        return found if action == "view" else found & self._pattern_q(action, field)

    def _pattern_q(self, action: str, field: str) -> Q:
        exact, globs = self._parts(action)
        found = ranges_q(exact, field)
        # The pattern alone: its prefix's range beside it would be a second lower bound
        # on the key, which SQLite may pick over the page's own and walk from there.
        for _, pattern in globs:
            found |= Q(QueueNameMatches(F(field), pattern))
        return found

    def _parts(self, action: str) -> tuple[list[Interval], list[tuple[Interval, Pattern]]]:
        """The exact key ranges of `action`'s names and prefixes (merged), and each
        other pattern with the range of its literal prefix."""
        key = f"parts:{action}"
        cached = self._cache.get(key)
        if cached is None:
            exact: list[Interval] = []
            globs: list[tuple[Interval, Pattern]] = []
            for pattern in sorted(self._patterns[action]):
                span, glob = pattern_parts(pattern)
                if glob is not None and span is not None:
                    globs.append((span, glob))
                elif span is not None:
                    exact.append(span)
            cached = self._cache[key] = (merge(exact), globs)
        return cached

    def _both(self, action: str) -> tuple[list[Interval], list[Interval]]:
        """`(covering, exact)` for `action` (with `view`): the key intervals its
        granted queues lie in, and those whose every key is granted."""
        key = f"both:{action}"
        cached = self._cache.get(key)
        if cached is None:
            exact, globs = self._parts("view")
            covering = merge([*exact, *(span for span, _ in globs)])
            if action != "view":
                a_exact, a_globs = self._parts(action)
                covering = intersect(covering, merge([*a_exact, *(s for s, _ in a_globs)]))
                exact = intersect(exact, a_exact)
            cached = self._cache[key] = (covering, exact)
        return cached

    def intervals(self, action: str = "view") -> list[Interval]:
        """The sorted, disjoint key intervals the queues where `action` is allowed lie
        in (not for an unrestricted scope, which has no limit): exactly their rows
        when `is_exact`, else a pattern's rows among others of its prefix."""
        _checked(action)
        return self._both(action)[0]

    def is_exact(self, action: str = "view") -> bool:
        """Whether every key in `intervals` is granted (names and prefixes only)."""
        covering, exact = self._both(_checked(action))
        return covering == exact

    def spans(
        self, action: str = "view", *, after: bytes | None = None, before: bytes | None = None
    ) -> Spans | None:
        """The key ranges a page or a search of the user's walks in turn (`Spans`),
        or None for an unrestricted scope (`search.keys_page(spans=...)`). `after` /
        `before`: the page's cursor key, where the walk of a pattern's queues starts
        (the queue holding it included)."""
        _checked(action)
        if self.unrestricted:
            return None
        return Spans(self, action, after=after, before=before)

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
        the names in the granted key ranges only, a bounded statement a page of
        names. `ValueError` for an invalid name."""
        if before is not None:
            bound: bytes | None = keys.encode_queue_name(before)
        else:
            bound = None if after is None else keys.encode_queue_name(after) + b"\x01"
        descending = before is not None
        spans: list[Interval] = [(b"", None)] if self.unrestricted else self.intervals(action)
        exact = self.unrestricted or self.is_exact(action)
        found: list[str] = []
        for low, high in clipped(spans, bound, descending):
            for name in names_between(low, high, descending, first=limit):
                if exact or self.allows(name, action):
                    found.append(name)
                    if len(found) >= limit:
                        return found
        return found

    def count(self, rows: QuerySet[Any], cap: int, action: str = "view") -> int:
        """How many of `rows` (a queryset of a model keyed by `key`) lie in the queues
        where `action` is allowed, counting at most `cap + 1`: the granted ranges in
        turn, at most `_COUNTED_RANGES` of them a statement."""
        if self.unrestricted:
            return int(rows.values("key")[: cap + 1].count())
        if not self.is_exact(action):
            # Few rows (those waiting for their backoff, say): each tested by the rules,
            # one statement; many: the granted queues' ranges in turn.
            few = int(rows.values("key")[: _TESTED_ROWS + 1].count())
            if few <= _TESTED_ROWS:
                return int(rows.filter(self.queue_q(action)).values("key")[: cap + 1].count())
        total = 0
        chunk: list[Interval] = []
        for span in itertools.chain(Spans(self, action), [None]):
            if span is not None:
                chunk.append(span)
            if chunk and (span is None or len(chunk) == _COUNTED_RANGES):
                part = rows.filter(ranges_q(chunk, "key")).values("key")
                total += int(part[: cap + 1 - total].count())
                chunk = []
                if total > cap:
                    break
        return total


class Spans(Sequence[Interval]):
    """The key ranges of a restricted user's queues, read in turn by a page (the
    changelist's, `by_span`) or a search (`search.keys_page(spans=...)`).

    Iterating gives exact ranges, sorted (`reversed`: descending), lazily: a range
    whose every key is granted as it is, and within a pattern's prefix range one
    range per queue it matches, found by walking that range's queue names a page
    at a time; a page that stops early stops the walk. `covering` is the few
    ranges they lie in (one per rule at most) and `keeps(key)` tells a granted key
    from another in them: a search walks `covering` and keeps what `keeps` keeps.
    Indexing or `len()` walks every name once (for code that wants a list)."""

    __slots__ = ("_exact", "_listed", "_start", "action", "covering", "exact", "scope")

    def __init__(
        self,
        scope: Scope,
        action: str = "view",
        *,
        after: bytes | None = None,
        before: bytes | None = None,
    ) -> None:
        self.scope = scope
        self.action = action
        # Where the walk starts: the queue of the cursor key, which may hold more rows.
        self._start = (
            (keys.prefix_of(after), False)
            if after is not None
            else (keys.prefix_of(before) + b"\x01", True)
            if before is not None
            else None
        )
        self.covering, self._exact = scope._both(action)
        self.exact = self.covering == self._exact
        self._listed: list[Interval] | None = None

    def _all(self) -> list[Interval]:
        if self._listed is None:
            self._listed = list(self.walk())
        return self._listed

    def __len__(self) -> int:
        return len(self._all())

    def __bool__(self) -> bool:
        return bool(self.covering)

    def __getitem__(self, index: Any) -> Any:
        return self._all()[index]

    def __repr__(self) -> str:
        return f"Spans({self.covering!r}, exact={self.exact})"

    def keeps(self, key: bytes) -> bool:
        """Whether `key`'s queue is one of the granted queues."""
        return self.exact or self.scope.allows(keys.queue_of(bytes(key)), self.action)

    def __iter__(self) -> Iterator[Interval]:
        return self.walk()

    def __reversed__(self) -> Iterator[Interval]:
        return self.walk(descending=True)

    def walk(self, *, descending: bool = False) -> Iterator[Interval]:
        """The exact ranges in key order (descending: reversed), from the cursor's
        queue when one was given for this direction."""
        start = self._start
        bound = start[0] if start is not None and start[1] == descending else None
        for low, high in clipped(self.covering, bound, descending):
            if self.exact or inside(low, high, self._exact):
                yield low, high
                continue
            for name in names_between(low, high, descending, first=_FIRST_WALK):
                if self.scope.allows(name, self.action):
                    yield keys.queue_bounds(name)


def _checked(action: str) -> str:
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; one of {', '.join(ACTIONS)}")
    return action


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


class Denied(DeadletterError):
    """The user's scope does not let them do `action` on `queue`: one of the two below,
    which each edge answers in its own form (the admin and the API map it once)."""

    def __init__(self, queue: str, action: str) -> None:
        super().__init__(f"Your queue access does not grant {action} on queue {queue!r}.")
        self.queue = queue
        self.action = action


class Hidden(Denied):
    """No grant lets the user see `queue`: answered exactly as an absent object (404),
    so that another team's queue, message or entry tells nothing of what exists."""


class Forbidden(Denied):
    """The user sees `queue` but `action` is not granted there (403)."""


def require(scope: Scope, queue: str, action: str = "view") -> None:
    """Nothing when `scope` (the user's, read once a request) allows `action` on
    `queue`; else `Forbidden` when it lets them see the queue, `Hidden` when not."""
    if scope.allows(queue, action):
        return
    if action != "view" and scope.allows(queue, "view"):
        raise Forbidden(queue, action)
    raise Hidden(queue, action)
