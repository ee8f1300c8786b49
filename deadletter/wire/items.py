"""The CBOR items of a stored value: the message array's head, and its items one at a time.

Apart from what the items mean (`reading`), so that a legacy aggregate of the
whole queue is walked item by item with memory bounded by one message, and a
head that promises more items than the bytes hold is refused before anything
is sized by it. `CodecError` lives here, the lowest of the codec's modules.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterator
from typing import Any

import cbor2

from deadletter.exceptions import DeadletterError

__all__ = ["INDEFINITE", "CodecError", "array_head", "load_items", "walk", "without_prefix"]


class CodecError(DeadletterError, ValueError):
    """A value that is not a CBOR list of messages, or a message that cannot be written as one."""


MAX_DEPTH = 32  # Go's fxamacker/cbor default MaxNestedLevels
INDEFINITE = -1
_self_described_run = re.compile(b"(?:\xd9\xd9\xf7)*").match
_loads = cbor2.loads
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
_DECODE_FAILURES = (
    cbor2.CBORError,
    ValueError,
    TypeError,
    OverflowError,
    RecursionError,
    MemoryError,
)

# The tags cbor2 6 turns into Python objects (datetime, Decimal, UUID, shared
# references, immutable containers under 55799...). Kept as raw `CBORTag`s
# instead: times need all nine fraction digits, which cbor2's tag 0 would cut
# to six, and an unknown key's value must be written back as it came.
_RAW_TAGS = (
    *(0, 1, 2, 3, 4, 5, 25, 28, 29, 30, 35, 36, 37, 52, 54, 100),
    *(256, 258, 260, 261, 1004, 43000, 55799),
)


def _keep_tag(tag: int) -> Callable[[Any, bool], cbor2.CBORTag]:
    def keep(value: Any, immutable: bool) -> cbor2.CBORTag:
        return cbor2.CBORTag(tag, value)

    return keep


_SEMANTIC_DECODERS = {tag: _keep_tag(tag) for tag in _RAW_TAGS}
_DECODER_OPTIONS: dict[str, Any] = {
    "semantic_decoders": _SEMANTIC_DECODERS,
    # Go's field names are text; refusing other keys also keeps crafted
    # integer keys with colliding hashes from making a dict quadratic.
    "strict_hashable_types": True,
}


def load_items(value: bytes) -> Any:
    """cbor2's reading of a value whose head `array_head` (or a 0x81 check) passed."""
    try:
        return _loads(
            value,
            max_depth=MAX_DEPTH,
            semantic_decoders=_SEMANTIC_DECODERS,
            strict_hashable_types=True,
        )
    except _DECODE_FAILURES as exc:
        raise CodecError(f"undecodable CBOR: {exc}") from exc


def walk(value: bytes, count: int, start: int) -> Iterator[Any]:
    """The `count` items (or, for `INDEFINITE`, up to the break) from offset `start`, decoded
    one at a time as they are consumed."""
    stream = io.BytesIO(value)
    stream.seek(start)
    decoder = cbor2.CBORDecoder(stream, max_depth=MAX_DEPTH - 1, **_DECODER_OPTIONS)
    index = 0
    while count == INDEFINITE or index < count:
        if count == INDEFINITE:
            position = stream.tell()
            if position >= len(value):
                raise CodecError(f"message {index}: truncated value (no end of array)")
            if value[position] == 0xFF:
                return
        try:
            item = decoder.decode()
        except _DECODE_FAILURES as exc:
            raise CodecError(f"message {index}: undecodable CBOR: {exc}") from exc
        yield item
        index += 1


def without_prefix(value: bytes) -> bytes:
    """`value` without tag 55799 ("this is CBOR") in front, which Go skips as well:
    found in one pass and cut once, so a long run of them costs linear time."""
    run = _self_described_run(value)
    end = run.end() if run else 0
    return value[end:] if end else value


def array_head(value: bytes) -> tuple[int, int]:
    """The message count and the offset of the first message; the count is -1 when indefinite.

    Null and undefined (Go's nil list) count as 0 messages. The head is read
    here rather than by cbor2 so that a count larger than the bytes that
    follow is refused before anything is sized by it.
    """
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
        return INDEFINITE, position
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
