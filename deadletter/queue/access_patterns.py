"""A `QueueAccess` pattern (`fnmatch.fnmatchcase`'s language) read once into parts,
so that Python and each database test a queue name the same way.

Python gets a compiled regular expression; SQL gets one condition of fixed size
on a key column (the name is the key's bytes before its first NUL): `GLOB` on
SQLite, a POSIX regular expression on PostgreSQL, `REGEXP` on MySQL/MariaDB.
A rule whose pattern is not a name nor a prefix is then one such condition a
statement, however many queues it matches (`queue.access`), where a list of
their key ranges would grow with them (SQLite refuses an expression deeper than
1,000, and the servers plan it for seconds).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

from django.db.models import BooleanField, Expression

__all__ = ["Pattern", "QueueNameMatches", "compiled"]

# Parts: a literal text, "*" (any run), "?" (one character), or a set.
_ANY = object()
_ONE = object()


@dataclasses.dataclass(frozen=True, slots=True)
class _Set:
    """A bracket expression: code point ranges, inclusive; `negated`: `[!...]`."""

    ranges: tuple[tuple[int, int], ...]
    negated: bool


def _stuff(pattern: str, i: int, j: int) -> str:
    """The text `fnmatch.translate` puts inside `[...]` for `pattern[i:j]` (the
    characters between `[` and `]`): kept as it builds it, so the set read from it
    (`_set_of`) is the set `fnmatchcase` uses."""
    stuff = pattern[i:j]
    if "-" not in stuff:
        stuff = stuff.replace("\\", r"\\")
    else:
        chunks = []
        k = i + 2 if pattern[i] == "!" else i + 1
        while True:
            k = pattern.find("-", k, j)
            if k < 0:
                break
            chunks.append(pattern[i:k])
            i = k + 1
            k = k + 3
        chunk = pattern[i:j]
        if chunk:
            chunks.append(chunk)
        else:
            chunks[-1] += "-"
        for k in range(len(chunks) - 1, 0, -1):
            if chunks[k - 1][-1] > chunks[k][0]:
                chunks[k - 1] = chunks[k - 1][:-1] + chunks[k][1:]
                del chunks[k]
        stuff = "-".join(s.replace("\\", r"\\").replace("-", r"\-") for s in chunks)
    return re.sub(r"([&~|])", r"\\\1", stuff)


def _set_of(stuff: str) -> _Set | None:
    """The set a regular expression's `[stuff]` holds, as `fnmatch.translate` makes
    it (None: it matches no character): `!` first negates, a `\\` escapes the next
    character, a bare `-` between two characters is a range."""
    if not stuff:
        return None
    if stuff == "!":
        return _Set((), negated=True)
    negated = stuff[0] == "!"
    body = stuff[1:] if negated else stuff
    ranges: list[tuple[int, int]] = []
    i, n = 0, len(body)

    def token(at: int) -> tuple[str, int]:
        if body[at] == "\\" and at + 1 < n:
            return body[at + 1], at + 2
        return body[at], at + 1

    while i < n:
        low, i = token(i)
        if i + 1 < n and body[i] == "-":
            high, i = token(i + 1)
            if ord(low) <= ord(high):
                ranges.append((ord(low), ord(high)))
        else:
            ranges.append((ord(low), ord(low)))
    if not ranges and not negated:
        return None
    return _Set(tuple(ranges), negated)


def _parse(pattern: str) -> list[Any] | None:
    """The parts of `pattern`, None when it can match nothing (an empty set)."""
    parts: list[Any] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            if not parts or parts[-1] is not _ANY:
                parts.append(_ANY)
        elif c == "?":
            parts.append(_ONE)
        elif c == "[":
            j = i
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                _literal(parts, "[")
                continue
            found = _set_of(_stuff(pattern, i, j))
            if found is None:
                return None
            parts.append(found)
            i = j + 1
        else:
            _literal(parts, c)
    return parts


def _literal(parts: list[Any], char: str) -> None:
    if parts and isinstance(parts[-1], str):
        parts[-1] += char
    else:
        parts.append(char)


def _regex_set(found: _Set, escape: Any) -> str:
    if not found.ranges:
        return "(?s:.)" if escape is re.escape else "."
    body = "".join(
        escape(chr(lo)) if lo == hi else f"{escape(chr(lo))}-{escape(chr(hi))}"
        for lo, hi in found.ranges
    )
    return f"[{'^' if found.negated else ''}{body}]"


def _server_escape(text: str) -> str:
    """A literal for PostgreSQL's and PCRE's/ICU's regular expressions: every
    ASCII character that is not a letter or digit behind a backslash."""
    return "".join(f"\\{c}" if c.isascii() and not c.isalnum() else c for c in text)


_GLOB_SPECIAL = frozenset("]-^")


def _glob_set(found: _Set) -> str:
    """A SQLite GLOB bracket of `found`: `]` first, `-` last, `^` never first."""
    if not found.ranges:
        return "?"
    specials: set[str] = set()
    plain: list[str] = []
    for lo, hi in found.ranges:
        start = lo
        for code in range(lo, hi + 1) if hi - lo < 0x80 else ():
            if chr(code) in _GLOB_SPECIAL:
                if start < code:
                    plain.append(_glob_range(start, code - 1))
                specials.add(chr(code))
                start = code + 1
        if hi - lo >= 0x80:
            for char in sorted(_GLOB_SPECIAL):
                if lo <= ord(char) <= hi:
                    specials.add(char)
            plain.append(_glob_range(lo, hi))  # its ends are not special: split below
        elif start <= hi:
            plain.append(_glob_range(start, hi))
    body = ("]" if "]" in specials else "") + "".join(plain)
    if "^" in specials:
        body += "^"
    if "-" in specials:
        body += "-"
    if not found.negated and body.startswith("^"):
        if body == "^":
            return "^"
        body = body[1:] + "^"
    return f"[{'^' if found.negated else ''}{body}]"


def _glob_range(lo: int, hi: int) -> str:
    return chr(lo) if lo == hi else f"{chr(lo)}-{chr(hi)}"


def _glob_literal(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


@dataclasses.dataclass(frozen=True)
class Pattern:
    """One pattern, parsed: `matches(name)` in Python, `sql_operand(vendor)` for SQL."""

    text: str
    parts: tuple[Any, ...] | None

    @functools.cached_property
    def _regex(self) -> re.Pattern[str] | None:
        if self.parts is None:
            return None
        return re.compile("(?s:" + "".join(self._pieces(re.escape, ".*", ".")) + r")\Z")

    def _pieces(self, escape: Any, many: str, one: str) -> list[str]:
        out: list[str] = []
        for part in self.parts or ():
            if part is _ANY:
                out.append(many)
            elif part is _ONE:
                out.append(one)
            elif isinstance(part, _Set):
                out.append(_regex_set(part, escape))
            else:
                out.append(escape(part))
        return out

    def matches(self, name: str) -> bool:
        regex = self._regex
        return regex is not None and regex.match(name) is not None

    def sql_operand(self, vendor: str) -> str | None:
        """The right operand of `GLOB` (SQLite) or of the regular expression match
        (the servers); None when the pattern matches nothing."""
        if self.parts is None:
            return None
        if vendor == "sqlite":
            return "".join(
                "*"
                if part is _ANY
                else "?"
                if part is _ONE
                else _glob_set(part)
                if isinstance(part, _Set)
                else _glob_literal(part)
                for part in self.parts
            )
        body = "".join(self._pieces(_server_escape, ".*", "."))
        if vendor == "postgresql":
            return f"^{body}$"
        return f"(?s)^{body}\\z"


@functools.lru_cache(maxsize=512)
def compiled(pattern: str) -> Pattern:
    parts = _parse(pattern)
    return Pattern(pattern, None if parts is None else tuple(parts))


class QueueNameMatches(Expression):
    """True for a row whose key column's queue name (its bytes before the first NUL,
    or the whole key for a legacy row) `pattern` matches: one condition of fixed
    size, whatever the number of queues it matches."""

    output_field = BooleanField()
    conditional = True

    def __init__(self, column: Any, pattern: Pattern) -> None:
        super().__init__()
        self.column = column
        self.pattern = pattern

    def get_source_expressions(self) -> list[Any]:
        return [self.column]

    def set_source_expressions(self, exprs: Any) -> None:
        (self.column,) = exprs

    def resolve_expression(self, *args: Any, **kwargs: Any) -> Any:
        copy = self.copy()
        copy.column = self.column.resolve_expression(*args, **kwargs)
        return copy

    def as_sql(self, compiler: Any, connection: Any) -> Any:
        column, params = compiler.compile(self.column)
        operand = self.pattern.sql_operand(connection.vendor)
        if operand is None:
            return "1 = 0", []
        nul = b"\x00"
        if connection.vendor == "sqlite":
            name = (
                f"CAST(CASE WHEN instr({column}, %s) > 0 "
                f"THEN substr({column}, 1, instr({column}, %s) - 1) ELSE {column} END AS TEXT)"
            )
            return f"{name} GLOB %s", [*params, nul, *params, nul, *params, *params, operand]
        if connection.vendor == "postgresql":
            name = (
                f"convert_from(CASE WHEN position(%s IN {column}) > 0 "
                f"THEN substring({column} FROM 1 FOR position(%s IN {column}) - 1) "
                f"ELSE {column} END, 'UTF8')"
            )
            return f"{name} ~ %s", [nul, *params, *params, nul, *params, *params, operand]
        name = f"CONVERT(SUBSTRING_INDEX({column}, %s, 1) USING utf8mb4) COLLATE utf8mb4_bin"
        return f"{name} REGEXP %s", [*params, nul, operand]
