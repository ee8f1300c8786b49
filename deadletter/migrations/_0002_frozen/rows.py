# Frozen for migration 0002: the row value it wrote for each message. Never edit.
"""The per-message row value of one decoded CBOR item: the bytes the codec of the time wrote
for the message it read from the item.

Read as Go's decoder fills `msgtypes.Message` (keys matched exactly, then
ASCII case-insensitively, the last one winning; missing keys as zero values;
times as text, tag 0, tag 1 or a bare epoch; unknown keys kept), then
written as Go's encoder writes it: the eight fields in Go's order, then the
unknown keys as they came. An item that is not a message is a `CodecError`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import cbor2

from deadletter.migrations._0002_frozen import items, times
from deadletter.migrations._0002_frozen.items import CodecError

__all__ = ["count_messages", "message_maps", "row_value"]

_NS = 1_000_000_000
_MIN_CODE = -(2**63)  # Go's EventCode is a plain int: 64 bits, signed
_MAX_CODE = 2**63 - 1
_UNDEFINED = cbor2.undefined
_ENCODE_FAILURES = (cbor2.CBORError, ValueError, TypeError, OverflowError, RecursionError)
# Go's zero values, in the order Go writes its fields.
_ZERO: dict[str, Any] = {
    "Timestamp": None,
    "QueuedAt": None,
    "Username": "",
    "Subject": "",
    "Descriptions": None,
    "Fields": None,
    "SkipRecipients": None,
    "Code": 0,
}


def message_maps(value: bytes) -> Iterator[dict[str, Any]]:
    """The map Go writes for each message of `value`, read one at a time."""
    for index, item in enumerate(items.walk(value)):
        yield _message_map(item, index)


def count_messages(value: bytes) -> int:
    """How many messages `value` holds: its head's count, or, for an indefinite-length
    array, the messages read through."""
    count = items.count_items(value)
    return sum(1 for _ in message_maps(value)) if count is None else count


def row_value(wire: dict[str, Any], stamp_ns: int | None = None) -> bytes:
    """The row value of one message map; with `stamp_ns`, a message without `QueuedAt`
    is stamped as queued at that instant."""
    if stamp_ns is not None and wire["QueuedAt"] is None:
        wire = {**wire, "QueuedAt": times.stamp_text(stamp_ns)}
    try:
        return cbor2.dumps([wire])
    except _ENCODE_FAILURES as exc:
        raise CodecError(f"cannot encode: {exc}") from exc


def _message_map(item: Any, index: int) -> dict[str, Any]:
    if type(item) is not dict:
        raise CodecError(f"message {index}: expected a map, got {_kind(item)}")
    wire = dict(_ZERO)
    extra: dict[str, Any] = {}
    named: set[str] = set()
    for key, raw in item.items():
        if type(key) is not str:
            raise CodecError(f"message {index}: map key {key!r} is not a text string")
        field = _field_for(key)
        if field is None:
            extra[key] = raw
            continue
        name, convert = field
        if name in named:
            continue  # Go's decoder: the first key naming a field wins, the rest are skipped
        named.add(name)
        wire[name] = convert(raw, index, name)
    wire.update(extra)
    return wire


def _time(raw: Any, index: int, name: str) -> str | None:
    kind = type(raw)
    if raw is None or raw is _UNDEFINED:
        return None
    if kind is int or kind is float:
        return _epoch(raw, index, name)
    if kind is cbor2.CBORTag and raw.tag == 1 and type(raw.value) in (int, float):
        return _epoch(raw.value, index, name)
    if kind is cbor2.CBORTag and raw.tag == 0 and type(raw.value) is str:
        raw = raw.value
    elif kind is not str:
        raise _wrong_type(index, name, "an RFC 3339 time or an epoch", raw)
    try:
        return times.go_text(raw)
    except ValueError as exc:
        raise CodecError(f"message {index}: {name}: {exc}") from None


def _epoch(seconds: int | float, index: int, name: str) -> str | None:
    """Go's reading of an epoch: whole seconds, fraction truncated to nanoseconds, UTC."""
    if type(seconds) is float:
        if not math.isfinite(seconds):
            raise CodecError(f"message {index}: {name}: epoch {seconds} is not a time")
        fraction, whole = math.modf(seconds)
        unix_ns = int(whole) * _NS + int(fraction * _NS)
    else:
        unix_ns = int(seconds) * _NS
    try:
        return times.epoch_text(unix_ns)
    except ValueError:
        raise CodecError(
            f"message {index}: {name}: epoch {seconds} is outside years 0000..9999"
        ) from None


def _text(raw: Any, index: int, name: str) -> str:
    if type(raw) is str:
        return raw
    if raw is None or raw is _UNDEFINED:
        return ""
    raise _wrong_type(index, name, "a text string", raw)


def _text_list(raw: Any, index: int, name: str) -> list[str] | None:
    if type(raw) is list:
        for position, element in enumerate(raw):
            if type(element) is not str:
                if element is None or element is _UNDEFINED:
                    raw[position] = ""
                else:
                    raise _wrong_type(index, f"{name}[{position}]", "a text string", element)
        return raw
    if raw is None or raw is _UNDEFINED:
        return None
    raise _wrong_type(index, name, "an array of text strings", raw)


def _code(raw: Any, index: int, name: str) -> int:
    if type(raw) is int and _MIN_CODE <= raw <= _MAX_CODE:
        return raw
    if raw is None or raw is _UNDEFINED:
        return 0
    raise _wrong_type(index, name, f"an integer in {_MIN_CODE}..{_MAX_CODE}", raw)


def _wrong_type(index: int, name: str, expected: str, raw: Any) -> CodecError:
    got = repr(raw) if type(raw) is int else _kind(raw)
    return CodecError(f"message {index}: {name}: expected {expected}, got {got}")


def _kind(raw: Any) -> str:
    if raw is None:
        return "null"
    if raw is _UNDEFINED:
        return "undefined"
    if type(raw) is cbor2.CBORTag:
        return f"tag {raw.tag}"
    return type(raw).__name__


_Converter = Callable[[Any, int, str], Any]
_FIELDS: dict[str, tuple[str, _Converter]] = {
    "Timestamp": ("Timestamp", _time),
    "QueuedAt": ("QueuedAt", _time),
    "Username": ("Username", _text),
    "Subject": ("Subject", _text),
    "Descriptions": ("Descriptions", _text_list),
    "Fields": ("Fields", _text_list),
    "SkipRecipients": ("SkipRecipients", _text_list),
    "Code": ("Code", _code),
}
_FOLDED_FIELDS = {name.lower(): field for name, field in _FIELDS.items()}


def _field_for(key: str) -> tuple[str, _Converter] | None:
    """Go's field for `key`: exact name first, then ASCII case-insensitively (a key with
    non-ASCII letters, the Kelvin sign say, never matches)."""
    field = _FIELDS.get(key)
    if field is None and key.isascii():
        field = _FOLDED_FIELDS.get(key.lower())
    return field
