"""The CBOR items of a stored value: the message array's head, and its items one at a time.

Apart from what the items mean (`reading`), so that a legacy aggregate of the
whole queue is walked item by item with memory bounded by one message, and a
head that promises more items than the bytes hold is refused before anything
is sized by it. `CodecError` lives here, the lowest of the codec's modules.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import cbor2

from deadletter.exceptions import DeadletterError

__all__ = [
    "INDEFINITE",
    "UNREADABLE",
    "CodecError",
    "Entries",
    "array_head",
    "item_end",
    "load_items",
    "message_item",
    "raw_entry",
    "walk",
    "without_prefix",
]


class CodecError(DeadletterError, ValueError):
    """A value that is not a CBOR list of messages, or a message that cannot be written as one."""


MAX_DEPTH = 32  # Go's fxamacker/cbor default MaxNestedLevels
INDEFINITE = -1
_SELF_DESCRIBED = b"\xd9\xd9\xf7"
_SELF_DESCRIBED_STRIDES = (_SELF_DESCRIBED * 4096, _SELF_DESCRIBED * 64, _SELF_DESCRIBED)
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
    one at a time as they are consumed; a message map is read as Go reads it
    (`message_item`)."""
    stream = io.BytesIO(value)
    stream.seek(start)
    decoder = cbor2.CBORDecoder(stream, max_depth=MAX_DEPTH - 1, **_DECODER_OPTIONS)
    index = 0
    while count == INDEFINITE or index < count:
        position = stream.tell()
        if count == INDEFINITE:
            if position >= len(value):
                raise CodecError(f"message {index}: truncated value (no end of array)")
            if value[position] == 0xFF:
                return
        try:
            item = decoder.decode()
        except _DECODE_FAILURES as exc:
            error = CodecError(f"message {index}: undecodable CBOR: {exc}")
            item = message_item(value, position, None, error)
            stream.seek(item.end)
            decoder = cbor2.CBORDecoder(stream, max_depth=MAX_DEPTH - 1, **_DECODER_OPTIONS)
        else:
            item = message_item(value, position, item)
        yield item
        index += 1


# --- a message map read entry by entry, as Go reads it -------------------------

UNREADABLE = object()
"""An `Entries` value cbor2 cannot hold (text that is not UTF-8): kept as its bytes."""


class Entries(list[tuple[Any, Any, bytes]]):
    """A message map read entry by entry: `(key, value, raw)` in the map's order, `raw`
    the entry's own CBOR bytes and `value` `UNREADABLE` when cbor2 cannot hold it.

    cbor2 reads a map into a dict, which keeps the *last* value of a key that
    repeats and refuses a map with an integer key or text that is not UTF-8
    anywhere in it. Go's decoder fills `msgtypes.Message` from the *first* key
    that names a field (exactly or ignoring case) and skips the later ones,
    skips integer keys and unknown keys' values unread. So such a map is read
    here entry by entry (`reading.message` applies Go's rules to it), never
    as cbor2's dict.
    """

    end: int = 0  # the offset just after the map


def message_item(
    value: bytes, position: int, decoded: Any = None, error: CodecError | None = None
) -> Any:
    """The message item at `position` as it must be read: `decoded` (cbor2's reading)
    unless the map there repeats a key, or, when cbor2 failed with `error`, the
    map read as `Entries` (`error` raised when even that fails)."""
    start, depth = position, 2
    while start < len(value) and value[start] >> 5 == 6:  # tags Go ignores around the map
        start, depth = _head(value, start, len(value))[1], depth + 1
        if depth > MAX_DEPTH:
            if error is None:
                return decoded
            raise error
    inner = decoded
    while type(inner) is cbor2.CBORTag:
        inner = inner.value
    if error is None:
        if not isinstance(inner, Mapping) or _entry_count(value, start) == len(inner):
            return decoded
    elif start >= len(value) or value[start] >> 5 != 5:
        raise error
    try:
        return _read_entries(value, start, depth)
    except CodecError:
        if error is not None:
            raise error from None
        raise


def _entry_count(value: bytes, position: int) -> int:
    """How many entries the map head at `position` announces; -1 for an indefinite
    map, which is read entry by entry whatever cbor2 made of it."""
    info = value[position] & 0x1F
    if info < 24:
        return info
    if info < 28:
        width = 1 << (info - 24)
        return int.from_bytes(value[position + 1 : position + 1 + width], "big")
    return -1


def _read_entries(value: bytes, position: int, depth: int) -> Entries:
    size = len(value)
    count, at = _head(value, position, size)
    entries = Entries()
    index = 0
    while count == INDEFINITE or index < count:
        if count == INDEFINITE:
            if at >= size:
                raise CodecError("truncated value: a map with no end")
            if value[at] == 0xFF:
                at += 1
                break
        key_end = item_end(value, at, depth)
        value_end = item_end(value, key_end, depth)
        try:
            key = _loads(value[at:key_end], **_DECODER_OPTIONS)
        except _DECODE_FAILURES as exc:
            raise CodecError(f"undecodable map key: {exc}") from exc
        try:
            item = _loads(value[key_end:value_end], max_depth=MAX_DEPTH - depth, **_DECODER_OPTIONS)
        except _DECODE_FAILURES:
            item = UNREADABLE
        entries.append((key, item, value[at:value_end]))
        at = value_end
        index += 1
    entries.end = at
    return entries


def _head(value: bytes, position: int, size: int) -> tuple[int, int]:
    """(argument, offset after the head) of the item at `position`; INDEFINITE for info 31."""
    if position >= size:
        raise CodecError("truncated value")
    info = value[position] & 0x1F
    if info < 24:
        return info, position + 1
    if info < 28:
        width = 1 << (info - 24)
        if position + 1 + width > size:
            raise CodecError("truncated value")
        return int.from_bytes(value[position + 1 : position + 1 + width], "big"), (
            position + 1 + width
        )
    if info == 31:
        return INDEFINITE, position + 1
    raise CodecError(f"malformed head 0x{value[position]:02x}")


def item_end(value: bytes, position: int, depth: int) -> int:
    """The offset just after the well-formed CBOR item at `position`, at nesting
    `depth`: what Go's decoder checks of a value it skips (its structure and
    Go's 32 levels, not what text inside holds)."""
    size = len(value)
    stack: list[int] = []  # items still to read in each open container (-1: to a break)
    at = position
    while True:
        if at >= size:
            raise CodecError("truncated value")
        if stack and stack[-1] == INDEFINITE and value[at] == 0xFF:
            at += 1
            stack.pop()
        else:
            major = value[at] >> 5
            argument, after = _head(value, at, size)
            if argument == INDEFINITE and major in (0, 1, 6, 7):
                raise CodecError(f"malformed head 0x{value[at]:02x}")
            if major in (2, 3):
                if argument == INDEFINITE:
                    at = after
                    while at < size and value[at] != 0xFF:
                        if value[at] >> 5 != major or value[at] & 0x1F == 31:
                            raise CodecError("malformed indefinite string")
                        length, at = _head(value, at, size)
                        at += length
                    at += 1
                else:
                    at = after + argument
                if at > size:
                    raise CodecError("truncated value")
            elif major in (4, 5, 6):
                if depth + len(stack) + 1 > MAX_DEPTH:
                    raise CodecError(f"nested deeper than {MAX_DEPTH} levels")
                items = 1 if major == 6 else argument
                if items != INDEFINITE and major == 5:
                    items *= 2
                at = after
                if items != 0:
                    stack.append(items)
                    continue
            else:
                at = after
        while stack and stack[-1] != INDEFINITE:
            stack[-1] -= 1
            if stack[-1]:
                break
            stack.pop()
        if not stack:
            return at


def without_prefix(value: bytes) -> bytes:
    """`value` without tag 55799 ("this is CBOR") in front, which Go skips as well:
    the run measured in strides of many tags, then of one (C compares, no copy, linear
    time), and cut once."""
    if not value.startswith(_SELF_DESCRIBED):
        return value
    end = 0
    for stride in _SELF_DESCRIBED_STRIDES:
        while value.startswith(stride, end):
            end += len(stride)
    return value[end:]


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


def raw_entry(entry: bytes) -> tuple[Any, bytes]:
    """A map entry kept as bytes (`Message.raw_entries`) as its key, read, and its
    value's own bytes: what a page shows of an entry cbor2 could not hold."""
    end = item_end(entry, 0, 0)
    return cbor2.loads(entry[:end]), bytes(entry[end:])
