# Frozen for migration 0002: how it finds the messages of a value. Never edit.
"""The CBOR items of a stored value: the message array's head, then its items one at a time.

What the codec of the time did before it judged a message: tag 55799 in
front skipped, null as no messages, a head promising more items than the
bytes hold refused, items decoded one by one (so memory stays bounded by one
message) with cbor2 keeping every tag raw and refusing non-text-like keys.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterator
from typing import Any

import cbor2

__all__ = ["CodecError", "count_items", "walk"]


class CodecError(ValueError):
    """A value that is not a CBOR list of messages, or a message that cannot be written as one."""


_MAX_DEPTH = 32  # Go's fxamacker/cbor default MaxNestedLevels
_INDEFINITE = -1
_self_described_run = re.compile(b"(?:\xd9\xd9\xf7)*").match
_MAJOR_TYPES = (
    "an unsigned integer",
    "a negative integer",
    "a byte string",
    "a text string",
    "an array",
    "a map",
    "a tag",
    "a simple value or float",
)
DECODE_FAILURES = (cbor2.CBORError, ValueError, TypeError, OverflowError, RecursionError)
_RAW_TAGS = (
    *(0, 1, 2, 3, 4, 5, 25, 28, 29, 30, 35, 36, 37, 52, 54, 100),
    *(256, 258, 260, 261, 1004, 43000, 55799),
)


def _keep_tag(tag: int) -> Callable[[Any, bool], cbor2.CBORTag]:
    def keep(value: Any, immutable: bool) -> cbor2.CBORTag:
        return cbor2.CBORTag(tag, value)

    return keep


_SEMANTIC_DECODERS = {tag: _keep_tag(tag) for tag in _RAW_TAGS}


def walk(value: bytes) -> Iterator[Any]:
    """The items of the message array `value` holds, decoded as they are consumed."""
    if not value:
        return
    value = _without_prefix(bytes(value))
    count, start = _array_head(value)
    stream = io.BytesIO(value)
    stream.seek(start)
    decoder = cbor2.CBORDecoder(
        stream,
        max_depth=_MAX_DEPTH - 1,
        semantic_decoders=_SEMANTIC_DECODERS,
        strict_hashable_types=True,
    )
    index = 0
    while count == _INDEFINITE or index < count:
        if count == _INDEFINITE:
            position = stream.tell()
            if position >= len(value):
                raise CodecError(f"message {index}: truncated value (no end of array)")
            if value[position] == 0xFF:
                return
        try:
            item = decoder.decode()
        except (*DECODE_FAILURES, MemoryError) as exc:
            raise CodecError(f"message {index}: undecodable CBOR: {exc}") from exc
        yield item
        index += 1


def count_items(value: bytes) -> int | None:
    """The item count the array head of `value` states; None for an indefinite-length array."""
    if not value:
        return 0
    count, _ = _array_head(_without_prefix(bytes(value)))
    return None if count == _INDEFINITE else count


def _without_prefix(value: bytes) -> bytes:
    run = _self_described_run(value)
    end = run.end() if run else 0
    return value[end:] if end else value


def _array_head(value: bytes) -> tuple[int, int]:
    """The item count (-1 when indefinite; 0 for null and undefined) and the first item's offset."""
    size = len(value)
    if not size:
        raise CodecError("truncated value: no message array")
    initial = value[0]
    position = 1
    if initial in (0xF6, 0xF7):
        return 0, position
    major, info = initial >> 5, initial & 0x1F
    if major != 4:
        raise CodecError(f"expected an array of messages, got {_MAJOR_TYPES[major]}")
    if info == 31:
        return _INDEFINITE, position
    if info < 24:
        count = info
    elif info < 28:
        width = 1 << (info - 24)
        if position + width > size:
            raise CodecError("truncated value: array head cut short")
        count = int.from_bytes(value[position : position + width], "big")
        position += width
    else:
        raise CodecError(f"malformed array head 0x{initial:02x}")
    if count > size - position:
        raise CodecError(f"array claims {count} messages but only {size - position} bytes follow")
    return count, position
