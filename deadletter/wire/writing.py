"""Writing a `Message` as the CBOR map Go's encoder writes for `msgtypes.Message`.

The eight fields in Go's order, times as untagged RFC3339Nano text (null for
the zero time), null for a nil list, then `extra` as it came. Each field is
checked here, before cbor2 sees it, so a bad message is one `CodecError`
naming the field and nothing is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import cbor2

from deadletter.wire.gotime import GoOnlyTime, GoTime
from deadletter.wire.items import CodecError
from deadletter.wire.messages import EventCode, Message
from deadletter.wire.reading import MAX_CODE, MIN_CODE, field_for, wrong_type

__all__ = ["ENCODE_FAILURES", "dumps", "unencodable", "wire_map"]

ENCODE_FAILURES = (cbor2.CBORError, ValueError, TypeError, OverflowError, RecursionError)


def wire_map(msg: Message, index: int, stamp_ns: int | None = None) -> dict[str, Any]:
    if type(msg) is not Message and not isinstance(msg, Message):
        raise CodecError(f"message {index}: expected a Message, got {type(msg).__name__}")
    username, subject, code = msg.username, msg.subject, msg.code
    if type(username) is not str:
        raise wrong_type(index, "Username", "a str", username)
    if type(subject) is not str:
        raise wrong_type(index, "Subject", "a str", subject)
    if type(code) is not int:
        if type(code) is not EventCode and (not isinstance(code, int) or isinstance(code, bool)):
            raise wrong_type(index, "Code", "an int", code)
        code = int(code)
    if not MIN_CODE <= code <= MAX_CODE:
        raise CodecError(f"message {index}: Code: {code} is outside {MIN_CODE}..{MAX_CODE}")
    timestamp: str | None = None
    queued_at: str | None = None
    if msg.timestamp is not None:
        timestamp = _wire_time(msg.timestamp, index, "Timestamp")
    if msg.queued_at is not None:
        queued_at = _wire_time(msg.queued_at, index, "QueuedAt")
    elif stamp_ns is not None:
        queued_at = _wire_time(GoTime.from_unix_ns(stamp_ns), index, "QueuedAt")
    descriptions = _wire_list(msg.descriptions, index, "Descriptions")
    fields = _wire_list(msg.fields, index, "Fields")
    skip = _wire_list(msg.skip_recipients, index, "SkipRecipients")
    wire = {
        "Timestamp": timestamp,
        "QueuedAt": queued_at,
        "Username": username,
        "Subject": subject,
        "Descriptions": descriptions,
        "Fields": fields,
        "SkipRecipients": skip,
        "Code": code,
    }
    if msg.extra:
        for key, value in msg.extra.items():
            if type(key) is not str:
                raise CodecError(f"message {index}: extra key {key!r} is not a str")
            if field_for(key) is not None:
                raise CodecError(f"message {index}: extra key {key!r} would be read as a field")
            wire[key] = value
    return wire


def dumps(wire: list[dict[str, Any]], msgs: Sequence[Message]) -> bytes:
    """cbor2's bytes for the maps `wire` of `msgs`, each map followed by its message's
    `raw_entries` as they came (cbor2 writes a dict head, then each key and value:
    the same bytes, written here when raw entries join them)."""
    if not any(msg.raw_entries for msg in msgs):
        return cbor2.dumps(wire)
    out = [_head(4, len(wire))]
    for mapping, msg in zip(wire, msgs, strict=True):
        out.append(_head(5, len(mapping) + len(msg.raw_entries)))
        out.extend(cbor2.dumps(key) + cbor2.dumps(value) for key, value in mapping.items())
        out.extend(bytes(entry) for entry in msg.raw_entries)
    return b"".join(out)


def _head(major: int, count: int) -> bytes:
    if count < 24:
        return bytes([major << 5 | count])
    for info, width in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if count < 1 << (8 * width):
            return bytes([major << 5 | info]) + count.to_bytes(width, "big")
    raise CodecError(f"{count} items cannot be written")


def _wire_time(time: GoTime | GoOnlyTime | datetime, index: int, name: str) -> str | None:
    if type(time) is not GoTime and type(time) is not GoOnlyTime:
        if not isinstance(time, datetime | GoOnlyTime):
            raise wrong_type(index, name, "a datetime or None", time)
        if isinstance(time, datetime):
            try:
                time = GoTime.from_datetime(time)
            except ValueError as exc:
                raise CodecError(f"message {index}: {name}: {exc}") from None
    if time.is_zero():
        return None
    try:
        return time.format()
    except ValueError as exc:
        raise CodecError(f"message {index}: {name}: {exc}") from None


def _wire_list(items: list[str] | None, index: int, name: str) -> list[str] | None:
    if items is None:
        return None
    if type(items) is not list and type(items) is not tuple:
        raise wrong_type(index, name, "a list of str or None", items)
    for item in items:
        if type(item) is not str:
            position = next(at for at, each in enumerate(items) if type(each) is not str)
            raise wrong_type(index, f"{name}[{position}]", "a str", items[position])
    return items


def unencodable(msgs: Sequence[Message], exc: Exception) -> CodecError:
    """Name the extra value cbor2 refused (the only part not checked before encoding)."""
    for index, msg in enumerate(msgs):
        for key, value in msg.extra.items():
            try:
                cbor2.dumps(value)
            except ENCODE_FAILURES as value_exc:
                return CodecError(f"message {index}: extra key {key!r}: {value_exc}")
    return CodecError(f"cannot encode: {exc}")
