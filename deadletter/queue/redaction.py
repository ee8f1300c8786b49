"""What is masked, and for whom: `DEADLETTER_REDACT` names a queue's sensitive values
and every edge that shows a message (the admin, the API, search) shows them as
`MASK` plus their length, unless the user holds `view_unredacted_queuedmessage`.

A name is a message part (`subject`, `username`, `descriptions`, `fields`,
`skip_recipients`; a list part's item by index, `fields[0]`), else an extra key
(`card_number`), dotted into a map or a JSON object held by that key
(`CeleryKwargs.email`). Lists are masked item by item, maps value by value, so
the shape (how many, which keys) stays readable. A redacted value quoted by
another text of the message (an error that names the address it failed on) is
masked there too, and so in the error texts kept beside the row (`scrubber`).
The stored row never changes: redaction is a view.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from deadletter.conf import conf
from deadletter.wire.messages import Message

__all__ = [
    "MASK",
    "PERMISSION",
    "RedactionError",
    "applies",
    "mask",
    "name_problem",
    "redacted",
    "redacted_names",
    "reveals",
    "left_behind",
    "scrubber",
    "setting_problems",
]

MASK = "•••"
PERMISSION = "deadletter.view_unredacted_queuedmessage"
TEXT_PARTS = ("subject", "username")
LIST_PARTS = ("descriptions", "fields", "skip_recipients")
# Parts that hold no personal data a mask could stand for (times, the event code).
UNMASKABLE = ("timestamp", "queued_at", "code")

SCRUB_MIN = 4
"""The fewest characters a redacted value has for other texts to be scrubbed of it:
a shorter one (a count, a flag, `"yes"`) would mask every such word of a traceback."""

_INDEXED = re.compile(r"^([a-z_]+)\[(\d+)\]$")
# A mask already in a text (`••• (16)`, or a signature's bare `•••`): skipped whole,
# so a redacted value that is a number never masks the length inside a mask.
_MASKED = f"{MASK}(?: \\(\\d+\\))?"
Rules = Callable[[str, Message], Iterable[str]]
Scrub = Callable[[str], str]


class RedactionError(ValueError):
    """A redacted name that names nothing a mask can stand for."""


@dataclasses.dataclass(frozen=True, slots=True)
class Name:
    """One parsed name: a part (with an item index), or an extra key and a path into it."""

    part: str | None = None
    index: int | None = None
    key: str | None = None
    path: tuple[str, ...] = ()


def parse(name: str) -> Name:
    """The name's meaning; `RedactionError` saying why for one that means nothing."""
    if not isinstance(name, str) or not name:
        raise RedactionError(f"a redacted name must be a non-empty text, got {name!r}")
    if name in UNMASKABLE:
        raise RedactionError(f"{name!r} is a time or a code, which is never masked")
    if name in TEXT_PARTS or name in LIST_PARTS:
        return Name(part=name)
    if "[" in name or "]" in name:
        found = _INDEXED.match(name)
        if found is None or found.group(1) not in LIST_PARTS:
            raise RedactionError(
                f"{name!r}: only a list part takes an index, as in fields[0] "
                f"(list parts: {', '.join(LIST_PARTS)})"
            )
        return Name(part=found.group(1), index=int(found.group(2)))
    key, *path = name.split(".")
    if not key or any(not step for step in path):
        raise RedactionError(f"{name!r}: an empty key in a dotted name")
    return Name(key=key, path=tuple(path))


def name_problem(name: Any) -> str | None:
    """What is wrong with one redacted name, or None (for the system check)."""
    try:
        parse(name)
    except RedactionError as exc:
        return str(exc)
    return None


def setting_problems(value: Any) -> list[str]:
    """What is wrong with a `DEADLETTER_REDACT` value, each problem a sentence."""
    if value is None or callable(value):
        return []
    if isinstance(value, str):
        try:
            found = import_string(value)
        except ImportError as exc:
            return [f"DEADLETTER_REDACT {value!r} does not import: {exc}"]
        return [] if callable(found) else [f"DEADLETTER_REDACT {value!r} is not callable"]
    if not isinstance(value, Mapping):
        return [
            "DEADLETTER_REDACT must be a dict of queue pattern -> names, a dotted path or "
            f"a callable, got {type(value).__name__}"
        ]
    problems = []
    for pattern, names in value.items():
        if not isinstance(pattern, str) or not pattern:
            problems.append(f"DEADLETTER_REDACT: queue pattern {pattern!r} is not a text")
            continue
        if isinstance(names, str) or not isinstance(names, Iterable):
            problems.append(
                f"DEADLETTER_REDACT[{pattern!r}] must be a list of names, got {names!r}"
            )
            continue
        for name in names:
            problem = name_problem(name)
            if problem:
                problems.append(f"DEADLETTER_REDACT[{pattern!r}]: {problem}")
    return problems


_rules: dict[str, Any] = {}
_by_queue: dict[str, tuple[Name, ...]] = {}
_QUEUES_KEPT = 4096


def _forget(*, setting: str, **kwargs: Any) -> None:
    if setting == "DEADLETTER_REDACT":
        _rules.clear()
        _by_queue.clear()


setting_changed.connect(_forget, dispatch_uid="deadletter.queue.redaction")


def _setting() -> Mapping[str, Iterable[str]] | Rules | None:
    """The setting as rules: a dict, a callable (a dotted path imported once), or None."""
    try:
        return _rules["rules"]
    except KeyError:
        pass
    value = conf.REDACT
    if isinstance(value, str):
        value = import_string(value)
    elif isinstance(value, Mapping) and not value:
        value = None
    _rules["rules"] = value
    return value


def _names_of(queue: str, msg: Message | None) -> tuple[Name, ...]:
    rules = _setting()
    if rules is None:
        return ()
    if callable(rules):
        if msg is None:
            return ()
        return tuple(parse(name) for name in rules(queue, msg))
    try:
        return _by_queue[queue]
    except KeyError:
        pass
    found = tuple(
        parse(name)
        for pattern, names in rules.items()
        if fnmatch.fnmatchcase(queue, pattern)
        for name in names
    )
    if len(_by_queue) >= _QUEUES_KEPT:
        _by_queue.clear()
    _by_queue[queue] = found
    return found


def applies(queue: str) -> bool:
    """Whether anything of `queue` may be redacted (always with a callable, which
    decides per message)."""
    rules = _setting()
    return rules is not None and (callable(rules) or bool(_names_of(queue, None)))


def redacted_names(queue: str, msg: Message) -> list[str]:
    """The names masked in `msg` of `queue` for a user who cannot reveal them."""
    rules = _setting()
    if rules is None:
        return []
    if callable(rules):
        return [str(name) for name in rules(queue, msg)]
    return [
        name
        for pattern, names in rules.items()
        if fnmatch.fnmatchcase(queue, pattern)
        for name in names
    ]


def reveals(user: Any) -> bool:
    """Whether `user` sees redacted values as they are."""
    return bool(user is not None and user.has_perm(PERMISSION))


def mask(value: Any) -> Any:
    """`value` masked: a text as `"••• (16)"` (its length in characters), each item
    of a list and each value of a map masked the same way; None and "" stay as they are."""
    if value is None or value == "":
        return value
    if isinstance(value, str):
        return f"{MASK} ({len(value)})"
    if isinstance(value, list | tuple):
        return [mask(item) for item in value]
    if isinstance(value, Mapping):
        return {k: mask(v) for k, v in value.items()}
    if isinstance(value, bytes | bytearray | memoryview):
        return f"{MASK} ({len(bytes(value))})"
    return f"{MASK} ({len(str(value))})"


def _masked_at(value: Any, path: tuple[str, ...]) -> Any:
    """`value` with the item at `path` masked (a map, or a JSON object in a text);
    unchanged when nothing is there."""
    if not path:
        return mask(value)
    if isinstance(value, str):
        try:
            loaded = json.loads(value)
        except ValueError:
            return value
        if not isinstance(loaded, dict):
            return value
        changed = _masked_at(loaded, path)
        return value if changed == loaded else json.dumps(changed, ensure_ascii=False)
    if isinstance(value, Mapping) and path[0] in value:
        return {**value, path[0]: _masked_at(value[path[0]], path[1:])}
    return value


def redacted(msg: Message, queue: str, *, reveal: bool) -> Message:
    """`msg` as a user sees it: `msg` itself when they may reveal or nothing of
    `queue` is redacted, else a copy with every redacted value masked, and every
    other text of it (its `LastError`, a traceback, a subject) scrubbed of them.
    Entries kept as bytes (`raw_entries`) cannot be masked: the copy leaves them out,
    as a redacted dump does."""
    if reveal:
        return msg
    names = _names_of(queue, msg)
    if not names:
        return msg
    scrub = _scrub_of(_hidden(msg, names), lengths=True)
    copy = msg.replace(raw_entries=())
    for name in names:
        if name.part is not None:
            value = getattr(copy, name.part)
            if name.index is None:
                setattr(copy, name.part, mask(value))
            elif value is not None and name.index < len(value):
                value[name.index] = mask(value[name.index])
        elif name.key is not None and name.key in copy.extra:
            copy.extra[name.key] = _masked_at(copy.extra[name.key], name.path)
    if scrub is None:
        return copy
    for part in (*TEXT_PARTS, *LIST_PARTS):
        setattr(copy, part, _scrubbed_in(getattr(copy, part), scrub))
    copy.extra = {k: _scrubbed_in(v, scrub) for k, v in copy.extra.items()}
    return copy


def redacted_all(msgs: list[Message], queue: str, *, reveal: bool) -> list[Message]:
    """`redacted` for each message of a row; the same list when none changes."""
    if reveal or _setting() is None:
        return msgs
    return [redacted(msg, queue, reveal=False) for msg in msgs]


def scrubber(
    queue: str, msgs: Iterable[Message] | None, *, reveal: bool, lengths: bool = True
) -> Scrub:
    """What a text kept beside the messages of a row of `queue` (an attempt's error,
    the archive's last error, a cause's signature) shows: each of their redacted
    values it quotes masked, with its length unless `lengths` is False (a signature,
    where two addresses must still be one cause). The text itself for a user who
    may reveal, and when nothing is redacted (no copy, no regex)."""
    if reveal or not msgs or _setting() is None:
        return _as_it_is
    hidden: set[str] = set()
    for msg in msgs:
        hidden.update(_hidden(msg, _names_of(queue, msg)))
    return _scrub_of(hidden, lengths=lengths) or _as_it_is


def left_behind(queue: str, old: Message, new: Message) -> Scrub | None:
    """Masks (with their lengths) the redacted values of `old` that `new` no longer
    holds: an edit that mends an address leaves the old one quoted in the errors of
    the attempts it failed, where `new` can no longer tell it is to be masked. None
    when it holds them all (nothing to rewrite)."""
    if _setting() is None:
        return None
    gone = _hidden(old, _names_of(queue, old)) - _hidden(new, _names_of(queue, new))
    return _scrub_of(gone, lengths=True)


def _as_it_is(text: str) -> str:
    return text


def _hidden(msg: Message, names: Iterable[Name]) -> set[str]:
    """The texts of the values `names` mask in `msg`, those long enough to look for."""
    found: set[str] = set()
    for name in names:
        if name.part is not None:
            value = getattr(msg, name.part)
            if name.index is not None:
                value = value[name.index] if value is not None and name.index < len(value) else None
        elif name.key is not None and name.key in msg.extra:
            value = _value_at(msg.extra[name.key], name.path)
        else:
            continue
        found.update(text for text in _texts_in(value) if len(text) >= SCRUB_MIN)
    return found


def _value_at(value: Any, path: tuple[str, ...]) -> Any:
    """What `_masked_at(value, path)` masks; None when nothing is there."""
    for step in path:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                return None
        if not isinstance(value, Mapping) or step not in value:
            return None
        value = value[step]
    return value


def _texts_in(value: Any) -> Iterator[str]:
    """Each leaf of a value as the text another text would quote it by."""
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _texts_in(item)
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _texts_in(item)
    elif isinstance(value, bytes | bytearray | memoryview):
        yield bytes(value).decode("utf-8", errors="replace")
    else:
        yield str(value)


def _scrub_of(hidden: Iterable[str], *, lengths: bool) -> Scrub | None:
    """A function masking each of `hidden` where a text quotes it as a whole word
    (a value starting or ending with a letter or digit is not looked for inside a
    longer word), whatever its case; None for nothing to look for. Most texts quote
    none: a lowercase containment test answers for them before any regex is built."""
    words = sorted(set(hidden), key=len, reverse=True)
    if not words:
        return None
    lowered = [word.lower() for word in words]
    compiled: list[re.Pattern[str]] = []

    def masked(match: re.Match[str]) -> str:
        if match.group(1) is not None:
            return match.group(1)
        return mask(match.group()) if lengths else MASK

    def scrub(text: str) -> str:
        low = text.lower()
        if not any(word in low for word in lowered):
            return text
        if not compiled:
            compiled.append(_pattern_of(tuple(words)))
        return compiled[0].sub(masked, text)

    return scrub


@functools.lru_cache(maxsize=256)
def _pattern_of(words: tuple[str, ...]) -> re.Pattern[str]:
    """A mask already there (kept), else any of `words` as a whole word, any case
    (kept for the next row of the same customer, or the same row's next text)."""
    alternatives = "|".join(
        ("(?<!\\w)" if re.match(r"\w", word) else "")
        + re.escape(word)
        + ("(?!\\w)" if re.search(r"\w$", word) else "")
        for word in words
    )
    return re.compile(f"({_MASKED})|{alternatives}", re.IGNORECASE)


def _scrubbed_in(value: Any, scrub: Scrub) -> Any:
    """`value` with `scrub` applied to each text in it (lists and maps copied)."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, list):
        return [_scrubbed_in(item, scrub) for item in value]
    if isinstance(value, dict):
        return {k: _scrubbed_in(v, scrub) for k, v in value.items()}
    return value
