"""A parsed search: conditions that must all hold, each able to check a row and to
say what the index can narrow it to (`terms`, a key range, a cause)."""

from __future__ import annotations

import calendar
import dataclasses
import operator
from collections.abc import Callable, Sequence
from datetime import datetime

from deadletter.queue.rows import attempts_of
from deadletter.queue.search.words import FREE_FIELDS, code_term, texts_of, words
from deadletter.wire.gotime import GoOnlyTime
from deadletter.wire.messages import Message

__all__ = [
    "COMPARISONS",
    "Attempts",
    "Cause",
    "Code",
    "FirstFailure",
    "KeyPrefix",
    "Phrase",
    "Query",
]

# What a comparison in the language says, by its operator.
COMPARISONS: dict[str, Callable[[int, int], bool]] = {
    "=": operator.eq,
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}


class Seen:
    """One message as the conditions read it: its texts, and those split into words,
    once, when the first condition asks, for all of them."""

    __slots__ = ("_folded", "_texts", "_words", "msg")

    def __init__(self, msg: Message) -> None:
        self.msg = msg
        self._texts: dict[str, list[str]] | None = None
        self._folded: str | None = None
        self._words: dict[str, list[list[str]]] | None = None

    def texts(self) -> dict[str, list[str]]:
        if self._texts is None:
            self._texts = texts_of(self.msg)
        return self._texts

    def folded(self) -> str:
        """Every text, case folded, in one string: a word of the message is a part
        of it, so a word that is not rules the message out before any split."""
        if self._folded is None:
            self._folded = "\n".join(t for texts in self.texts().values() for t in texts).casefold()
        return self._folded

    def words(self) -> dict[str, list[list[str]]]:
        if self._words is None:
            self._words = {
                name: [words(text) for text in texts] for name, texts in self.texts().items()
            }
        return self._words


@dataclasses.dataclass(frozen=True, slots=True)
class Phrase:
    """Whole words, in this order, in one text of `field` (None: any free field or
    other key; `key:<name>` one other key)."""

    words: tuple[str, ...]
    field: str | None = None

    def terms(self) -> set[str]:
        return set(self.words)

    def holds(self, seen: Seen) -> bool:
        folded = seen.folded()
        if any(word not in folded for word in self.words):
            return False
        by_field = seen.words()
        if self.field is None:
            fields = [*FREE_FIELDS, *(name for name in by_field if name.startswith("key:"))]
        else:
            fields = [self.field]
        return any(self._in(found) for name in fields for found in by_field.get(name, ()))

    def _in(self, found: list[str]) -> bool:
        size = len(self.words)
        if size == 1:
            return self.words[0] in found
        return any(
            tuple(found[start : start + size]) == self.words
            for start in range(len(found) - size + 1)
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Code:
    code: int

    def terms(self) -> set[str]:
        return {code_term(self.code)}

    def holds(self, seen: Seen) -> bool:
        return int(seen.msg.code) == self.code


@dataclasses.dataclass(frozen=True, slots=True)
class Attempts:
    """The failed deliveries so far (the drain's `Attempts`, 0 when absent) compared
    with `count` by `op` (a key of `COMPARISONS`); a corrupt count never matches."""

    op: str
    count: int

    def terms(self) -> set[str]:
        # The count is a word of the row's `Attempts` key: an equality narrows by it.
        return {str(self.count)} if self.op == "=" and self.count > 0 else set()

    def holds(self, seen: Seen) -> bool:
        found = attempts_of(seen.msg.extra)
        return found is not None and COMPARISONS[self.op](found, self.count)


@dataclasses.dataclass(frozen=True, slots=True)
class FirstFailure:
    """The first failure (`QueuedAt`) at or after `after` (strictly after with
    `after_strict`) and before `before` (at or before with `before_inclusive`)."""

    after: datetime | None = None
    before: datetime | None = None
    after_strict: bool = False
    before_inclusive: bool = False
    # The bounds in nanoseconds, inclusive, worked out once: `low <= instant <= high`.
    low: int | None = dataclasses.field(init=False, repr=False, compare=False)
    high: int | None = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        low = None if self.after is None else _ns(self.after) + int(self.after_strict)
        high = None if self.before is None else _ns(self.before) - int(not self.before_inclusive)
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)

    def terms(self) -> set[str]:
        return set()

    def holds(self, seen: Seen) -> bool:
        when = seen.msg.queued_at
        if when is None:
            return False
        instant = when.unix_ns if isinstance(when, GoOnlyTime) else _ns(when)
        return (self.low is None or instant >= self.low) and (
            self.high is None or instant <= self.high
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Cause:
    """The stored failure signature, exactly (the admin's cause filter)."""

    signature: str


@dataclasses.dataclass(frozen=True, slots=True)
class KeyPrefix:
    """The key's lowercase hex starts with `hex`."""

    hex: str

    def bounds(self) -> tuple[bytes, bytes | None]:
        """The key range of the prefix: `[low, high)`, high None past the last key."""
        low = bytes.fromhex(self.hex + "0" * (len(self.hex) % 2))
        top = int(self.hex, 16) + 1
        if top >= 16 ** len(self.hex):
            return low, None
        high_hex = f"{top:0{len(self.hex)}x}"
        return low, bytes.fromhex(high_hex + "0" * (len(high_hex) % 2))


MessageCondition = Phrase | Code | FirstFailure | Attempts


def _ns(when: datetime) -> int:
    """The instant in nanoseconds: Go's times carry it; a plain aware datetime to the
    microsecond."""
    nanos = getattr(when, "unix_ns", None)
    if isinstance(nanos, int):
        return nanos
    return calendar.timegm(when.utctimetuple()) * 10**9 + when.microsecond * 1000


@dataclasses.dataclass(frozen=True, slots=True)
class Query:
    """Every condition must hold: those on the message by one message of the row
    (a legacy row holds several), `causes` on the row's signature, `prefixes` on
    its key. An empty query matches every row."""

    text: str = ""
    conditions: tuple[MessageCondition, ...] = ()
    causes: tuple[Cause, ...] = ()
    prefixes: tuple[KeyPrefix, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.conditions or self.causes or self.prefixes)

    @property
    def terms(self) -> set[str]:
        """The terms every matching row has in the index."""
        found: set[str] = set()
        for condition in self.conditions:
            found |= condition.terms()
        return found

    @property
    def first_failure_after(self) -> datetime | None:
        bounds = [c.after for c in self.conditions if isinstance(c, FirstFailure) and c.after]
        return max(bounds) if bounds else None

    @property
    def reads_messages(self) -> bool:
        return bool(self.conditions)

    def matches(self, key: bytes, msgs: Sequence[Message] | None, signature: str | None) -> bool:
        """The rule itself: what the index found is kept only if this holds. `msgs`
        is None for a row that does not decode; it matches only a query without
        conditions on the message."""
        if any(signature != cause.signature for cause in self.causes):
            return False
        if self.prefixes and not all(key.hex().startswith(p.hex) for p in self.prefixes):
            return False
        if not self.conditions:
            return True
        if not msgs:
            return False
        return any(all(c.holds(seen) for c in self.conditions) for seen in map(Seen, msgs))
