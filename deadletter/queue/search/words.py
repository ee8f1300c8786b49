"""What a search can find in a message: its texts, field by field, and their words.

One rule for both sides: the indexer stores the words `terms_of` gives, a query
is split into words by `words`, and the check of a candidate row reads the same
`texts_of`. A word is a run of Unicode letters, digits and underscores, case
folded, cut to `TERM_CHARS` (a longer word is found by its start, and the check
of the row decides).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from deadletter.models import TERM_CHARS
from deadletter.queue.rows import LAST_ERROR_KEY
from deadletter.wire.messages import Message

__all__ = ["CODE_PREFIX", "FREE_FIELDS", "code_term", "terms_of", "texts_of", "words"]

_WORD = re.compile(r"\w+")
# The term of a message's code: `:` is never part of a word, so no word collides.
CODE_PREFIX = "code:"
# The texts free words are looked for in (every other key of the message too).
FREE_FIELDS = ("subject", "user", "descriptions", "fields", "error")
# Nesting is bounded by the codec (Go's 32 levels); this only guards the walk.
_MAX_DEPTH = 40


def words(text: str) -> list[str]:
    """The words of `text`, in order, case folded and cut to `TERM_CHARS`."""
    return [word[:TERM_CHARS] for word in _WORD.findall(text.casefold())]


def code_term(code: int) -> str:
    return f"{CODE_PREFIX}{int(code)}"


def texts_of(msg: Message) -> dict[str, list[str]]:
    """The message's searchable texts by field: the five `FREE_FIELDS` and, under
    `key:<name>` (the name case folded), each other key's text."""
    texts: dict[str, list[str]] = {
        "subject": [msg.subject],
        "user": [msg.username],
        "descriptions": list(msg.descriptions or ()),
        "fields": list(msg.fields or ()),
        "error": [],
    }
    for name, value in msg.extra.items():
        found = list(_flatten(value, 0))
        if name == LAST_ERROR_KEY:
            texts["error"] = found
        else:
            texts.setdefault(f"key:{name.casefold()}", []).extend(found)
    return texts


def terms_of(msgs: Iterable[Message]) -> set[str]:
    """Every term the index holds for a row of `msgs`: the words of all their texts
    and the code of each (the texts read in one pass: a word never spans two, as
    the separator is not part of a word)."""
    terms: set[str] = set()
    for msg in msgs:
        terms.add(code_term(msg.code))
        joined = "\n".join(text for texts in texts_of(msg).values() for text in texts)
        for word in _WORD.findall(joined.casefold()):
            terms.add(word if len(word) <= TERM_CHARS else word[:TERM_CHARS])
    return terms


def _flatten(value: Any, depth: int) -> Iterator[str]:
    """The text in a value of the user's own key: strings and numbers, and the keys
    and values of maps and lists inside it (a Celery task's arguments)."""
    if depth > _MAX_DEPTH or value is None:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, bool | int | float | datetime):
        yield str(value)
    elif isinstance(value, dict):
        for name, item in value.items():
            yield from _flatten(name, depth + 1)
            yield from _flatten(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _flatten(item, depth + 1)
