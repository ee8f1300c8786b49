"""The search language, parsed in one place for the admin, the API and the commands.

A search is terms separated by spaces that must all hold: a bare word (whole, in any
searchable text, case-insensitive), "a phrase" (its words together, in this order),
or a qualifier `name:value`; the qualifiers and what each finds are in
`qualifiers.QUALIFIERS`, and any other `NAME:value` is the message's key of that
name. A quoted value is a phrase. A date without a time is its midnight, a time
without an offset is in the current time zone (Django's). A comparison (`>`, `>=`,
`<`, `<=`, `=` before an unquoted value) is read only on the qualifiers that say
so (`qualifiers.COMPARED`); anywhere else it is an error, never a search for the
digits after it (quote the value to search for its words).
"""

from __future__ import annotations

import re
from datetime import datetime, time, timedelta

from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from deadletter.conf import conf
from deadletter.queue.search.qualifiers import COMPARED, NAMES
from deadletter.queue.search.query import (
    Attempts,
    Cause,
    Code,
    FirstFailure,
    KeyPrefix,
    MessageCondition,
    Phrase,
    Query,
)
from deadletter.queue.search.words import words

__all__ = ["MAX_QUERY_CHARS", "MAX_TERMS", "SearchError", "parse", "quote"]

MAX_QUERY_CHARS = 1000
MAX_TERMS = 20
_FIELDS = {"subject": "subject", "user": "user", "error": "error"}
_HEX = re.compile(r"[0-9a-f]+")
# One term: NAME:"quoted value", NAME:value, "a phrase", or a bare word; inside
# quotes a backslash keeps the next character as it is (\" and \\).
_TERM = re.compile(
    r'(?P<name>[^\s:"]+):(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s"]*))'
    r'|"(?P<phrase>(?:[^"\\]|\\.)*)"'
    r'|(?P<word>[^\s"]+)'
)
_ESCAPE = re.compile(r"\\(.)")
# A comparison before a value: the longest operator first.
_COMPARISON = re.compile(r"(>=|<=|>|<|=)(.*)", re.DOTALL)
_COMPARED = ", ".join(f"{name}:" for name in COMPARED[:-1]) + f" and {COMPARED[-1]}:"
_AGE = re.compile(r"(\d{1,9})([smhdw])")
_AGE_UNIT = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


class SearchError(ValueError):
    """A query that cannot be run; the message says what to change."""


def parse(text: str, *, after: datetime | None = None, before: datetime | None = None) -> Query:
    """The query `text` says, with `after` / `before` (aware datetimes) bounding the
    first failure as `after:` / `before:` do. Raises `SearchError`."""
    text = text.strip()
    if len(text) > MAX_QUERY_CHARS:
        raise SearchError(f"the search is {len(text)} characters; at most {MAX_QUERY_CHARS}")
    conditions: list[MessageCondition] = []
    causes: list[Cause] = []
    prefixes: list[KeyPrefix] = []
    position = 0
    count = 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position >= len(text):
            break
        found = _TERM.match(text, position)
        if found is None or (found.end() < len(text) and not text[found.end()].isspace()):
            raise SearchError(f"a quote is not closed near {text[position : position + 30]!r}")
        position = found.end()
        count += 1
        if count > MAX_TERMS:
            raise SearchError(f"the search has more than {MAX_TERMS} terms")
        name = found["name"]
        if name is None:
            phrase = found["phrase"]
            if phrase is None and found["word"][0] in "<>":
                word = found["word"]
                raise SearchError(
                    f"{word!r} compares nothing: name what ({_COMPARED} take "
                    f'>, >=, <, <=: attempts:>3), or quote it to search for its words: "{word}"'
                )
            text_of = found["word"] if phrase is None else _ESCAPE.sub(r"\1", phrase)
            conditions.append(_phrase(text_of or "", None))
            continue
        quoted = found["quoted"]
        value = found["bare"] if quoted is None else _ESCAPE.sub(r"\1", quoted)
        _qualifier(name, value or "", quoted is not None, conditions, causes, prefixes)
    if after is not None or before is not None:
        conditions.append(FirstFailure(after and _aware(after), before and _aware(before)))
    return Query(text, tuple(conditions), tuple(causes), tuple(prefixes))


def quote(value: str) -> str:
    """`value` as one quoted term of the language (`cause:` + this finds it exactly)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _qualifier(
    name: str,
    value: str,
    quoted: bool,
    conditions: list[MessageCondition],
    causes: list[Cause],
    prefixes: list[KeyPrefix],
) -> None:
    folded = name.casefold()
    if not value:
        raise SearchError(f'{name}: needs a value (quote one with spaces: {name}:"...")')
    compared = _COMPARISON.fullmatch(value)
    if folded in COMPARED:
        op, value = (compared[1], compared[2]) if compared else (None, value)
        if not value:
            raise SearchError(f"{name}: needs a value after {op}")
        conditions.append(_compared(folded, op, value))
        return
    if compared is not None and not quoted:
        hint = {
            "code": "code: names one code (code:500)",
            "key": "key: takes the start of a key in hex",
        }.get(folded, f'quote the value to search for its words: {name}:"{value}"')
        raise SearchError(
            f"{name}: takes no comparison ({compared[1]}); only {_COMPARED} do "
            f"(attempts:>3, age:>2d); {hint}"
        )
    if folded not in NAMES:
        conditions.append(_phrase(value, f"key:{folded}"))
    elif folded in _FIELDS:
        conditions.append(_phrase(value, _FIELDS[folded]))
    elif folded == "code":
        conditions.append(Code(_code(value)))
    elif folded == "cause":
        causes.append(Cause(value))
    elif folded == "key":
        hex_text = value.casefold()
        if not _HEX.fullmatch(hex_text):
            raise SearchError(f"key: wants the start of a key in hex, got {value!r}")
        prefixes.append(KeyPrefix(hex_text))
    else:
        raise AssertionError(f"the qualifier {name}: is in the table but not read")


def _compared(name: str, op: str | None, value: str) -> MessageCondition:
    """The condition of `attempts:`, `age:`, `after:` or `before:` with its
    comparison `op` (None: none written)."""
    if name == "attempts":
        if not value.isascii() or not value.isdigit():
            raise SearchError(
                f"attempts: wants a whole number, after >, >=, <, <= or = if you like "
                f"(attempts:>3), got {value!r}"
            )
        return Attempts(op or "=", int(value))
    if name == "age":
        found = _AGE.fullmatch(value.casefold())
        if op is None or op == "=" or found is None:
            raise SearchError(
                "age: wants >, >=, < or <= and a number of s, m, h, d or w "
                f"(age:>2d, age:<90m), got {(op or '') + value!r}"
            )
        try:
            since = timezone.now() - timedelta(**{_AGE_UNIT[found[2]]: int(found[1])})
        except OverflowError:
            raise SearchError(f"age: {value} reaches before the year 1") from None
        # Older than the age is a first failure before now minus it, and the reverse.
        if op.startswith(">"):
            return FirstFailure(before=since, before_inclusive=op == ">=")
        return FirstFailure(after=since, after_strict=op == "<")
    when = _when(name, value)
    if name == "after":
        if op not in (None, ">", ">="):
            raise SearchError(
                f"after: takes > or >= (after:>{value}); for an earlier first failure "
                f"use before:{value}"
            )
        return FirstFailure(after=when, after_strict=op == ">")
    if op not in (None, "<", "<="):
        raise SearchError(
            f"before: takes < or <= (before:<={value}); for a later first failure use after:{value}"
        )
    return FirstFailure(before=when, before_inclusive=op == "<=")


def _phrase(text: str, field: str | None) -> Phrase:
    found = words(text)
    if not found:
        where = f"{field}:" if field and not field.startswith("key:") else ""
        raise SearchError(f"{where}{text!r} has no word to search for (letters or digits)")
    return Phrase(tuple(found), field)


def _code(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        pass
    names = {name.casefold(): code for code, name in conf.EVENT_CODES.items()}
    code = names.get(value.casefold())
    if code is None:
        known = ", ".join(sorted(conf.EVENT_CODES.values())) or "none are set"
        raise SearchError(
            f"code: wants a number or a name from DEADLETTER_EVENT_CODES ({known}), got {value!r}"
        )
    return code


def _when(name: str, value: str) -> datetime:
    try:
        moment = parse_datetime(value)
        if moment is None and (day := parse_date(value)) is not None:
            moment = datetime.combine(day, time())
    except ValueError:
        moment = None
    if moment is None:
        raise SearchError(
            f"{name}: wants an ISO date or date-time (2026-12-01, 2026-12-01T14:30), got {value!r}"
        )
    return _aware(moment)


def _aware(moment: datetime) -> datetime:
    if timezone.is_naive(moment):
        return timezone.make_aware(moment)
    return moment
