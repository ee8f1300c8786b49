"""Reading one decoded CBOR item as a `Message`, the way Go's decoder fills `msgtypes.Message`.

Case-insensitive keys, missing keys as zero values, times as text, tag 0,
tag 1 or a bare epoch; unknown keys kept in `Message.extra` so they are
written back. Anything that is not a message is one `CodecError` naming the
field: the C reading (`_speedups.go_message`) takes only Go's exact shape and
leaves every other item, and every error, to this code.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import cbor2

from deadletter.wire.gotime import GoOnlyTime, GoTime, from_go_text
from deadletter.wire.items import UNREADABLE, CodecError, Entries
from deadletter.wire.messages import EventCode, Message

__all__ = [
    "EVENT_CODES",
    "GO_KEYS",
    "MAX_CODE",
    "MIN_CODE",
    "field_for",
    "generic_message",
    "message",
    "wrong_type",
]

_NS = 1_000_000_000
GO_KEYS = (
    "Timestamp",
    "QueuedAt",
    "Username",
    "Subject",
    "Descriptions",
    "Fields",
    "SkipRecipients",
    "Code",
)
EVENT_CODES: dict[int, int] = {int(code): code for code in EventCode}
_new = object.__new__
_join = "".join
_GO_ZERO_NS = GoTime.parse("0001-01-01T00:00:00Z").unix_ns
_MIN_EPOCH_NS = GoTime.parse("0000-01-01T00:00:00Z").unix_ns
_MAX_EPOCH_NS = GoTime.parse("9999-12-31T23:59:59.999999999Z").unix_ns
MIN_CODE = -(2**63)  # Go's EventCode is a plain int: 64 bits, signed
MAX_CODE = 2**63 - 1
_UNDEFINED = cbor2.undefined
_FROZEN_DICT = type(cbor2.loads(b"\xc9\xa0").value)
_SELF_DESCRIBED = 55799  # Go strips it before any value; any other tag on a time is refused


def message(item: Any, index: int) -> Message:
    """The Python reading and judging of one decoded message (`CodecError` if it is not one)."""
    if type(item) is not dict:
        return generic_message(item, index)
    names = tuple(item)
    extra: dict[str, Any] = {}
    # The shape Go writes, its eight fields in order, then (a user's message)
    # keys of its own: the same checks as `_generic_message`, inline for the
    # types Go writes, with the converters' error paths for anything else.
    if names == GO_KEYS:
        timestamp, queued_at, username, subject, descriptions, fields, skip, code = item.values()
    elif names[:8] == GO_KEYS and all(
        type(name) is str and field_for(name) is None for name in names[8:]
    ):
        values = tuple(item.values())
        timestamp, queued_at, username, subject, descriptions, fields, skip, code = values[:8]
        extra = dict(zip(names[8:], values[8:], strict=True))
    else:
        return generic_message(item, index)
    if type(timestamp) is str:
        timestamp = _go_text(timestamp, index, "Timestamp")
    elif timestamp is not None:
        timestamp = _time(timestamp, index, "Timestamp")
    if type(queued_at) is str:
        queued_at = _go_text(queued_at, index, "QueuedAt")
    elif queued_at is not None:
        queued_at = _time(queued_at, index, "QueuedAt")
    if type(username) is not str:
        username = _text(username, index, "Username")
    if type(subject) is not str:
        subject = _text(subject, index, "Subject")
    try:
        # Joining checks that every element is a str, in C.
        if type(descriptions) is list:
            _join(descriptions)
        elif descriptions is not None:
            raise TypeError
        if type(fields) is list:
            _join(fields)
        elif fields is not None:
            raise TypeError
        if type(skip) is list:
            _join(skip)
        elif skip is not None:
            raise TypeError
    except TypeError:
        descriptions = _text_list(descriptions, index, "Descriptions")
        fields = _text_list(fields, index, "Fields")
        skip = _text_list(skip, index, "SkipRecipients")
    if type(code) is not int or not MIN_CODE <= code <= MAX_CODE:
        code = _code(code, index, "Code")
    msg = _new(Message)
    msg.__dict__ = {
        "timestamp": timestamp,
        "queued_at": queued_at,
        "username": username,
        "subject": subject,
        "descriptions": descriptions,
        "fields": fields,
        "skip_recipients": skip,
        "code": EVENT_CODES.get(code, code),
        "extra": extra,
    }
    return msg


def generic_message(item: Any, index: int) -> Message:
    """Any map Go's decoder reads as a `msgtypes.Message`: the first key naming a field
    (exactly or ignoring case) fills it and later ones are dropped, as Go skips
    them; integer keys in Go's int64 range and unknown keys' values cbor2
    cannot hold are kept as bytes (`raw_entries`); unregistered tags around the
    map are ignored, as Go ignores them."""
    item = _untagged(item, index, "message")
    if type(item) is dict:
        entries: Any = ((key, raw, None) for key, raw in item.items())
    elif type(item) is Entries:
        entries = item
    else:
        raise CodecError(f"message {index}: expected a map, got {_kind(item)}")
    values: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    kept: list[bytes] = []
    for key, raw, entry in entries:
        field = _FIELDS.get(key) if type(key) is str else None
        if field is None:
            if type(key) is int and MIN_CODE <= key <= MAX_CODE and entry is not None:
                kept.append(entry)
                continue
            if type(key) is not str:
                raise CodecError(f"message {index}: map key {key!r} is not a text string")
            field = field_for(key)
            if field is None:
                if key in extra:
                    continue
                if raw is UNREADABLE:
                    kept.append(entry)
                else:
                    extra[key] = raw
                continue
        name, attribute, convert = field
        if attribute in values:
            continue
        if raw is UNREADABLE:
            raise CodecError(f"message {index}: {name}: undecodable CBOR (text that is not UTF-8?)")
        values[attribute] = convert(raw, index, name)
    return Message(**values, extra=extra, raw_entries=tuple(kept))


def _untagged(raw: Any, index: int, name: str) -> Any:
    """`raw` without the tags Go's decoder ignores around a message, a text, a list or
    an integer: any but the bignums (2, 3), and 0 and 1 only around what they
    must hold (text, a number)."""
    while type(raw) is cbor2.CBORTag:
        tag, inner = raw.tag, raw.value
        if (
            tag in (2, 3)
            or (tag == 0 and type(inner) is not str)
            or (tag == 1 and type(inner) not in (int, float))
        ):
            raise wrong_type(index, name, "a value Go reads", raw)
        raw = inner
    if type(raw) is _FROZEN_DICT:  # how cbor2 gives a map inside a tag
        raw = dict(raw.items())
    return raw


def _go_text(text: str, index: int, name: str) -> GoTime | GoOnlyTime | None:
    """A time as Go writes it: text, kept as it came when it is Go's canonical form."""
    try:
        time = from_go_text(text)
    except ValueError as exc:
        raise CodecError(f"message {index}: {name}: {exc}") from None
    return None if text < "0002" and time.is_zero() else time


def _time(raw: Any, index: int, name: str) -> GoTime | GoOnlyTime | None:
    while type(raw) is cbor2.CBORTag and raw.tag == _SELF_DESCRIBED:
        raw = raw.value
    kind = type(raw)
    if kind is str:
        text = raw
    elif raw is None or raw is _UNDEFINED:
        return None
    elif kind is int or kind is float:
        return _epoch(raw, index, name)
    elif kind is cbor2.CBORTag and raw.tag == 0 and type(raw.value) is str:
        text = raw.value
    elif kind is cbor2.CBORTag and raw.tag == 1 and type(raw.value) in (int, float):
        return _epoch(raw.value, index, name)
    else:
        raise wrong_type(index, name, "an RFC 3339 time or an epoch", raw)
    return _go_text(text, index, name)


def _epoch(seconds: int | float, index: int, name: str) -> GoTime | GoOnlyTime | None:
    """Go's reading of an epoch: whole seconds, fraction truncated to nanoseconds, UTC."""
    if type(seconds) is float:
        if not math.isfinite(seconds):
            raise CodecError(f"message {index}: {name}: epoch {seconds} is not a time")
        fraction, whole = math.modf(seconds)
        unix_ns = int(whole) * _NS + int(fraction * _NS)
    else:
        unix_ns = int(seconds) * _NS
    if not _MIN_EPOCH_NS <= unix_ns <= _MAX_EPOCH_NS:
        raise CodecError(f"message {index}: {name}: epoch {seconds} is outside years 0000..9999")
    return None if unix_ns == _GO_ZERO_NS else GoTime.from_unix_ns(unix_ns)


def _text(raw: Any, index: int, name: str) -> str:
    raw = _untagged(raw, index, name)
    if type(raw) is str:
        return raw
    if raw is None or raw is _UNDEFINED:
        return ""
    raise wrong_type(index, name, "a text string", raw)


def _text_list(raw: Any, index: int, name: str) -> list[str] | None:
    raw = _untagged(raw, index, name)
    if type(raw) is list:
        for position, element in enumerate(raw):
            if type(element) is cbor2.CBORTag:
                element = raw[position] = _untagged(element, index, f"{name}[{position}]")
            if type(element) is not str:
                if element is None or element is _UNDEFINED:
                    raw[position] = ""
                else:
                    raise wrong_type(index, f"{name}[{position}]", "a text string", element)
        return raw
    if raw is None or raw is _UNDEFINED:
        return None
    raise wrong_type(index, name, "an array of text strings", raw)


def _code(raw: Any, index: int, name: str) -> int:
    raw = _untagged(raw, index, name)
    if type(raw) is int and MIN_CODE <= raw <= MAX_CODE:
        return raw
    if raw is None or raw is _UNDEFINED:
        return 0
    raise wrong_type(index, name, f"an integer in {MIN_CODE}..{MAX_CODE}", raw)


def wrong_type(index: int, name: str, expected: str, raw: Any) -> CodecError:
    got = repr(raw) if type(raw) is int else _kind(raw)
    return CodecError(f"message {index}: {name}: expected {expected}, got {got}")


def _kind(raw: Any) -> str:
    if raw is None:
        return "null"
    if raw is _UNDEFINED:
        return "undefined"
    if type(raw) is cbor2.CBORTag:
        return f"tag {raw.tag}"
    return _KINDS.get(type(raw), type(raw).__name__)


_KINDS: dict[type, str] = {
    str: "a text string",
    bytes: "a byte string",
    int: "an integer",
    float: "a float",
    bool: "a boolean",
    list: "an array",
    dict: "a map",
    cbor2.CBORSimpleValue: "a simple value",
}

_Converter = Callable[[Any, int, str], Any]
_FIELDS: dict[Any, tuple[str, str, _Converter]] = {
    name: (name, attribute, convert)
    for name, attribute, convert in (
        ("Timestamp", "timestamp", _time),
        ("QueuedAt", "queued_at", _time),
        ("Username", "username", _text),
        ("Subject", "subject", _text),
        ("Descriptions", "descriptions", _text_list),
        ("Fields", "fields", _text_list),
        ("SkipRecipients", "skip_recipients", _text_list),
        ("Code", "code", _code),
    )
}
_FOLDED_FIELDS = {name.lower(): field for name, field in _FIELDS.items()}


def field_for(key: str) -> tuple[str, str, _Converter] | None:
    """The field Go fills from `key`: exact name first, then ASCII case-insensitively.

    Go compares byte lengths before folding case, so a key with non-ASCII
    letters (the Kelvin sign, the long s) never matches an ASCII field name.
    """
    field = _FIELDS.get(key)
    if field is None and key.isascii():
        field = _FOLDED_FIELDS.get(key.lower())
    return field
