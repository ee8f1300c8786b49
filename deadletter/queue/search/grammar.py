"""The search language, parsed in one place for the admin, the API and the commands.

    word                 the word, whole, in any searchable text (case-insensitive)
    "two words"          the words together, in this order
    subject:word  user:  error:    in that text only (a quoted value is a phrase)
    code:500  code:GRADE           the code, by number or by `DEADLETTER_EVENT_CODES` name
    cause:"..."          the failure signature, exactly
    key:0a1b             the key's hex starts so
    after:2026-12-01  before:2026-12-01T14:30     the first failure (`QueuedAt`)
    NAME:value           another key of the message (`order_id:1234`)

Terms are separated by spaces and must all hold. A date without a time is its
midnight, a time without an offset is in the current time zone (Django's).
"""

from __future__ import annotations

import re
from datetime import datetime, time

from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from deadletter.conf import conf
from deadletter.queue.search.query import (
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
            text_of = found["word"] if phrase is None else _ESCAPE.sub(r"\1", phrase)
            conditions.append(_phrase(text_of or "", None))
            continue
        quoted = found["quoted"]
        value = found["bare"] if quoted is None else _ESCAPE.sub(r"\1", quoted)
        _qualifier(name, value or "", conditions, causes, prefixes)
    if after is not None or before is not None:
        conditions.append(FirstFailure(after and _aware(after), before and _aware(before)))
    return Query(text, tuple(conditions), tuple(causes), tuple(prefixes))


def quote(value: str) -> str:
    """`value` as one quoted term of the language (`cause:` + this finds it exactly)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _qualifier(
    name: str,
    value: str,
    conditions: list[MessageCondition],
    causes: list[Cause],
    prefixes: list[KeyPrefix],
) -> None:
    folded = name.casefold()
    if not value:
        raise SearchError(f'{name}: needs a value (quote one with spaces: {name}:"...")')
    if folded in _FIELDS:
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
    elif folded in ("after", "before"):
        when = _when(folded, value)
        bound = FirstFailure(after=when) if folded == "after" else FirstFailure(before=when)
        conditions.append(bound)
    else:
        conditions.append(_phrase(value, f"key:{folded}"))


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
