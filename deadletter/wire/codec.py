"""The queue's value: CBOR bytes exactly as the Go program writes and reads `[]msgtypes.Message`.

Writing mirrors Go's encoder byte for byte (field order, untagged RFC3339Nano
times, null for zero times and nil lists), so a row Python rewrites is one Go
could have written. Reading mirrors Go's decoder (case-insensitive keys,
missing keys as zero values, trailing bytes ignored, times as text, tag 0,
tag 1 or a bare epoch), except that it keeps unknown keys in `Message.extra`
so they are written back. Every malformed value raises `CodecError` and
nothing else: a corrupt row is dropped by the queue, never allowed to crash a
scan.

The work is split by job: `items` walks the CBOR items, `reading` reads one
as a `Message`, `writing` writes one back; this module puts them together
with the C speed-up (`_speedups.c`), which answers for Go's exact shapes and
leaves the rest to the Python code.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from deadletter.wire import gotime
from deadletter.wire.gotime import GoTime
from deadletter.wire.items import (
    INDEFINITE,
    CodecError,
    array_head,
    load_items,
    message_item,
    walk,
    without_prefix,
)
from deadletter.wire.messages import EventCode, Message
from deadletter.wire.reading import EVENT_CODES, GO_KEYS, message
from deadletter.wire.writing import ENCODE_FAILURES, dumps, unencodable, wire_map

__all__ = [
    "CodecError",
    "count_messages",
    "decode",
    "decode_single",
    "encode",
    "encode_one",
    "iter_decode",
]


def _set_up_speedups() -> Any:
    """The C extension `gotime` loaded (None when it was not compiled: the Python
    code then does it all), set up with the classes it builds messages of."""
    if gotime.speedups is None:
        return None
    # The nine the C code builds; `raw_entries` keeps its class default there, and a
    # message that has some is written by the Python code.
    attributes = tuple(field.name for field in dataclasses.fields(Message))[:9]
    gotime.speedups.setup(Message, GoTime, EVENT_CODES, GO_KEYS, attributes, EventCode)
    return gotime.speedups


_speedups = _set_up_speedups()
# Each returns None for whatever is not exactly Go's shape, which the Python
# code then reads or writes (and refuses, when it is not a message).
_go_message: Callable[[Any], Message | None] | None = _speedups and _speedups.go_message
_go_encode: Callable[[Message, int | None], bytes | None] | None = _speedups and _speedups.go_encode
_go_decode: Callable[[bytes], Message | None] | None = _speedups and _speedups.go_decode
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _read_rows_in_c(
    rows: Sequence[Any], start: int, stop: int, cutoff_ns: int, max_row_bytes: int, pair: type
) -> tuple[list[Any], int]:
    """The C reading with its two limits held to the 64 bits C compares in, which
    changes nothing it finds: no message's time lies before the earliest 64-bit
    instant and no row is larger than the largest 64-bit size. A cutoff past the
    latest instant expires every message, which the Python rules then apply."""
    if cutoff_ns > _INT64_MAX:
        return [], start
    cutoff_ns = max(cutoff_ns, _INT64_MIN)
    max_row_bytes = min(max(max_row_bytes, _INT64_MIN), _INT64_MAX)
    found: tuple[list[Any], int] = _speedups.read_rows(
        rows, start, stop, cutoff_ns, max_row_bytes, pair
    )
    return found


read_rows: Callable[..., tuple[list[Any], int]] | None = _speedups and _read_rows_in_c
"""The C reading of a page's common rows (`queue.rows.common_messages`), or None."""


@contextlib.contextmanager
def python_only() -> Iterator[None]:
    """The Python reading and writing alone for the block (times too), for
    benchmarks that print both figures; not thread-safe, never for serving code."""
    global _go_message, _go_encode, _go_decode, read_rows
    saved = _go_message, _go_encode, _go_decode, read_rows
    _go_message = _go_encode = _go_decode = read_rows = None
    try:
        with gotime.python_only():
            yield
    finally:
        _go_message, _go_encode, _go_decode, read_rows = saved


def decode(value: bytes) -> list[Message]:
    """The messages of one stored value.

    A zero-length value and CBOR null are the empty list, as for the Go bot.
    """
    if not value:
        return []
    if type(value) is not bytes:
        value = bytes(value)
    single = decode_single(value)
    if single is not None:
        return [single]
    value = without_prefix(value)
    count, start = array_head(value)
    if count == 0:
        return []
    return list(_iter_items(value, count, start))


def decode_single(value: bytes) -> Message | None:
    """The message of a per-message row (an array of one), or None for any other
    shape, which `decode` then reads: the scan's fast path, one call a row."""
    if _go_decode is not None:
        msg = _go_decode(value)
        if msg is not None:
            return msg
    if type(value) is not bytes or len(value) < 2 or value[0] != 0x81:
        return None
    try:
        item = message_item(value, 1, load_items(value)[0])
    except CodecError as exc:
        item = message_item(value, 1, None, exc)
    return _message_of(item, 0)


def iter_decode(value: bytes) -> Iterator[Message]:
    """The messages of one stored value, decoded one at a time as they are consumed.

    Memory stays bounded by one message beyond `value` itself, so a legacy
    blob of the whole queue can be split. A value that is not an array fails
    here; a bad message fails when the iteration reaches it.
    """
    if not value:
        return iter(())
    value = without_prefix(bytes(value))
    count, start = array_head(value)
    if count == 0:
        return iter(())
    return _iter_items(value, count, start)


def count_messages(value: bytes) -> int:
    """How many messages `value` holds, read off its array head without decoding them.

    An indefinite-length array says no count: it is read through, message by
    message. A head that promises more than the bytes hold, or no array at
    all, raises `CodecError`; a message that does not decode is found only
    when it is read (`iter_decode`).
    """
    if not value:
        return 0
    value = without_prefix(bytes(value))
    count, _ = array_head(value)
    if count == INDEFINITE:
        return sum(1 for _ in iter_decode(value))
    return count


def _iter_items(value: bytes, count: int, start: int) -> Iterator[Message]:
    for index, item in enumerate(walk(value, count, start)):
        yield _message_of(item, index)


def _message_of(item: Any, index: int) -> Message:
    """One decoded message: the C reading when it recognises Go's shape, else `reading.message`."""
    if _go_message is not None:
        msg = _go_message(item)
        if msg is not None:
            return msg
    return message(item, index)


def encode(msgs: Sequence[Message]) -> bytes:
    """Go's bytes for `msgs`: what its encoder writes for the same `[]Message`."""
    wire = [wire_map(msg, index) for index, msg in enumerate(msgs)]
    try:
        value = dumps(wire, msgs)
    except ENCODE_FAILURES as exc:
        raise unencodable(msgs, exc) from exc
    return _read_back(value, msgs) if any(m.extra or m.raw_entries for m in msgs) else value


def encode_one(msg: Message, stamp_ns: int | None = None) -> bytes:
    """`encode([msg])`: the value of a per-message row. With `stamp_ns`, a message
    without `queued_at` is written as queued at that instant (UTC), with no copy
    of it made to say so: the store's stamp."""
    if _go_encode is not None and not msg.raw_entries:
        value = _go_encode(msg, stamp_ns)
        if value is not None:
            return value
    wire = [wire_map(msg, 0, stamp_ns)]
    try:
        value = dumps(wire, [msg])
    except ENCODE_FAILURES as exc:
        raise unencodable([msg], exc) from exc
    return _read_back(value, [msg]) if msg.extra or msg.raw_entries else value


def _read_back(value: bytes, msgs: Sequence[Message]) -> bytes:
    """`value` once it reads back: cbor2 writes some extra values the reading
    refuses (a map keyed by an int, nesting past Go's 32 levels), and a row
    nobody can read must not be stored, nor one whose extra values would come
    back as `raw_entries`. The eight fields are checked before encoding, so
    only a message with extra keys needs this."""
    try:
        again = decode(value)
    except CodecError as exc:
        raise CodecError(f"would not read back: {exc}") from None
    kept = [len(msg.raw_entries) for msg in again]
    if kept != [len(msg.raw_entries) for msg in msgs]:
        raise CodecError(
            "would not read back: an extra value would come back as bytes (keyed by a number?)"
        )
    return value
