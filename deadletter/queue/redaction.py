"""What is masked, and for whom: `DEADLETTER_REDACT` names a queue's sensitive values
and every edge that shows a message (the admin, the API, search) shows them as
`MASK` plus their length, unless the user holds `view_unredacted_queuedmessage`.

A name is a message part (`subject`, `username`, `descriptions`, `fields`,
`skip_recipients`; a list part's item by index, `fields[0]`), else an extra key
(`card_number`), dotted into a map or a JSON object held by that key
(`CeleryKwargs.email`). Lists are masked item by item, maps value by value, so
the shape (how many, which keys) stays readable. The stored row never changes:
redaction is a view.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import re
from collections.abc import Callable, Iterable, Mapping
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
    "setting_problems",
]

MASK = "•••"
PERMISSION = "deadletter.view_unredacted_queuedmessage"
TEXT_PARTS = ("subject", "username")
LIST_PARTS = ("descriptions", "fields", "skip_recipients")
# Parts that hold no personal data a mask could stand for (times, the event code).
UNMASKABLE = ("timestamp", "queued_at", "code")

_INDEXED = re.compile(r"^([a-z_]+)\[(\d+)\]$")
Rules = Callable[[str, Message], Iterable[str]]


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
    `queue` is redacted, else a copy with every redacted value masked."""
    if reveal:
        return msg
    names = _names_of(queue, msg)
    if not names:
        return msg
    copy = msg.replace()
    for name in names:
        if name.part is not None:
            value = getattr(copy, name.part)
            if name.index is None:
                setattr(copy, name.part, mask(value))
            elif value is not None and name.index < len(value):
                value[name.index] = mask(value[name.index])
        elif name.key is not None and name.key in copy.extra:
            copy.extra[name.key] = _masked_at(copy.extra[name.key], name.path)
    return copy


def redacted_all(msgs: list[Message], queue: str, *, reveal: bool) -> list[Message]:
    """`redacted` for each message of a row; the same list when none changes."""
    if reveal or _setting() is None:
        return msgs
    return [redacted(msg, queue, reveal=False) for msg in msgs]
