"""The queue's value: CBOR bytes exactly as the Go program writes and reads `[]msgtypes.Message`.

Writing mirrors Go's encoder byte for byte (field order, untagged RFC3339Nano
times, null for zero times and nil lists), so a row Python rewrites is one Go
could have written. Reading mirrors Go's decoder (case-insensitive keys,
missing keys as zero values, trailing bytes ignored, times as text, tag 0,
tag 1 or a bare epoch), except that it keeps unknown keys in `Message.extra`
so they are written back. Every malformed value raises `CodecError` and
nothing else: a corrupt row is dropped by the queue, never allowed to crash a
scan.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import re
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any

import cbor2

from deadletter.exceptions import DeadletterError
from deadletter.wire import gotime
from deadletter.wire.gotime import GoOnlyTime, GoTime, from_go_text
from deadletter.wire.messages import EventCode, Message

__all__ = [
    "CodecError",
    "count_messages",
    "decode",
    "decode_single",
    "encode",
    "encode_one",
    "iter_decode",
]


class CodecError(DeadletterError, ValueError):
    """A value that is not a CBOR list of messages, or a message that cannot be written as one."""


_NS = 1_000_000_000
_GO_KEYS = (
    "Timestamp",
    "QueuedAt",
    "Username",
    "Subject",
    "Descriptions",
    "Fields",
    "SkipRecipients",
    "Code",
)
_EVENT_CODES: dict[int, int] = {int(code): code for code in EventCode}
_new = object.__new__
_join = "".join
_loads = cbor2.loads
_GO_ZERO_NS = GoTime.parse("0001-01-01T00:00:00Z").unix_ns
_MIN_EPOCH_NS = GoTime.parse("0000-01-01T00:00:00Z").unix_ns
_MAX_EPOCH_NS = GoTime.parse("9999-12-31T23:59:59.999999999Z").unix_ns
_MIN_CODE = -(2**63)  # Go's EventCode is a plain int: 64 bits, signed
_MAX_CODE = 2**63 - 1
_MAX_DEPTH = 32  # Go's fxamacker/cbor default MaxNestedLevels
_INDEFINITE = -1
_SELF_DESCRIBED = b"\xd9\xd9\xf7"
_self_described_run = re.compile(b"(?:\xd9\xd9\xf7)*").match
_UNDEFINED = cbor2.undefined
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
_ENCODE_FAILURES = (cbor2.CBORError, ValueError, TypeError, OverflowError, RecursionError)

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


def _set_up_speedups() -> Any:
    """The C extension `gotime` loaded (None when it was not compiled: the Python
    code then does it all), set up with the classes it builds messages of."""
    if gotime.speedups is None:
        return None
    attributes = tuple(field.name for field in dataclasses.fields(Message))
    gotime.speedups.setup(Message, GoTime, _EVENT_CODES, _GO_KEYS, attributes, EventCode)
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
    value = _without_self_described_prefix(value)
    count, _ = _array_head(value)
    if count == 0:
        return []
    return [_message_of(item, index) for index, item in enumerate(_load_items(value))]


def decode_single(value: bytes) -> Message | None:
    """The message of a per-message row (an array of one), or None for any other
    shape, which `decode` then reads: the scan's fast path, one call a row."""
    if _go_decode is not None:
        msg = _go_decode(value)
        if msg is not None:
            return msg
    if type(value) is not bytes or len(value) < 2 or value[0] != 0x81:
        return None
    return _message_of(_load_items(value)[0], 0)


def _load_items(value: bytes) -> Any:
    """cbor2's reading of a value whose head `_array_head` (or the 0x81 check) passed."""
    try:
        return _loads(
            value,
            max_depth=_MAX_DEPTH,
            semantic_decoders=_SEMANTIC_DECODERS,
            strict_hashable_types=True,
        )
    except _DECODE_FAILURES as exc:
        raise CodecError(f"undecodable CBOR: {exc}") from exc


def iter_decode(value: bytes) -> Iterator[Message]:
    """The messages of one stored value, decoded one at a time as they are consumed.

    Memory stays bounded by one message beyond `value` itself, so a legacy
    blob of the whole queue can be split. A value that is not an array fails
    here; a bad message fails when the iteration reaches it.
    """
    if not value:
        return iter(())
    value = _without_self_described_prefix(bytes(value))
    count, start = _array_head(value)
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
    value = _without_self_described_prefix(bytes(value))
    count, _ = _array_head(value)
    if count == _INDEFINITE:
        return sum(1 for _ in iter_decode(value))
    return count


def _iter_items(value: bytes, count: int, start: int) -> Iterator[Message]:
    stream = io.BytesIO(value)
    stream.seek(start)
    decoder = cbor2.CBORDecoder(stream, max_depth=_MAX_DEPTH - 1, **_DECODER_OPTIONS)
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
        except _DECODE_FAILURES as exc:
            raise CodecError(f"message {index}: undecodable CBOR: {exc}") from exc
        yield _message_of(item, index)
        index += 1


def _without_self_described_prefix(value: bytes) -> bytes:
    """`value` without tag 55799 ("this is CBOR") in front, which Go skips as well:
    found in one pass and cut once, so a long run of them costs linear time."""
    run = _self_described_run(value)
    end = run.end() if run else 0
    return value[end:] if end else value


def _array_head(value: bytes) -> tuple[int, int]:
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


def _message_of(item: Any, index: int) -> Message:
    """One decoded message: the C reading when it recognises Go's shape, else `_message`."""
    if _go_message is not None:
        msg = _go_message(item)
        if msg is not None:
            return msg
    return _message(item, index)


def _message(item: Any, index: int) -> Message:
    """The Python reading and judging of one decoded message (`CodecError` if it is not one)."""
    if type(item) is not dict:
        return _generic_message(item, index)
    names = tuple(item)
    extra: dict[str, Any] = {}
    # The shape Go writes, its eight fields in order, then (a user's message)
    # keys of its own: the same checks as `_generic_message`, inline for the
    # types Go writes, with the converters' error paths for anything else.
    if names == _GO_KEYS:
        timestamp, queued_at, username, subject, descriptions, fields, skip, code = item.values()
    elif names[:8] == _GO_KEYS and all(
        type(name) is str and _field_for(name) is None for name in names[8:]
    ):
        values = tuple(item.values())
        timestamp, queued_at, username, subject, descriptions, fields, skip, code = values[:8]
        extra = dict(zip(names[8:], values[8:], strict=True))
    else:
        return _generic_message(item, index)
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
    if type(code) is not int or not _MIN_CODE <= code <= _MAX_CODE:
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
        "code": _EVENT_CODES.get(code, code),
        "extra": extra,
    }
    return msg


def _generic_message(item: Any, index: int) -> Message:
    if type(item) is not dict:
        raise CodecError(f"message {index}: expected a map, got {_kind(item)}")
    values: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, raw in item.items():
        field = _FIELDS.get(key)
        if field is None:
            if type(key) is not str:
                raise CodecError(f"message {index}: map key {key!r} is not a text string")
            field = _field_for(key)
            if field is None:
                extra[key] = raw
                continue
        name, attribute, convert = field
        values[attribute] = convert(raw, index, name)
    return Message(**values, extra=extra)


def _go_text(text: str, index: int, name: str) -> GoTime | GoOnlyTime | None:
    """A time as Go writes it: text, kept as it came when it is Go's canonical form."""
    try:
        time = from_go_text(text)
    except ValueError as exc:
        raise CodecError(f"message {index}: {name}: {exc}") from None
    return None if text < "0002" and time.is_zero() else time


def _time(raw: Any, index: int, name: str) -> GoTime | GoOnlyTime | None:
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
        raise _wrong_type(index, name, "an RFC 3339 time or an epoch", raw)
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


def _field_for(key: str) -> tuple[str, str, _Converter] | None:
    """The field Go fills from `key`: exact name first, then ASCII case-insensitively.

    Go compares byte lengths before folding case, so a key with non-ASCII
    letters (the Kelvin sign, the long s) never matches an ASCII field name.
    """
    field = _FIELDS.get(key)
    if field is None and key.isascii():
        field = _FOLDED_FIELDS.get(key.lower())
    return field


def encode(msgs: Sequence[Message]) -> bytes:
    """Go's bytes for `msgs`: what its encoder writes for the same `[]Message`."""
    wire = [_wire_map(msg, index) for index, msg in enumerate(msgs)]
    try:
        value = cbor2.dumps(wire)
    except _ENCODE_FAILURES as exc:
        raise _unencodable(msgs, exc) from exc
    return _read_back(value) if any(msg.extra for msg in msgs) else value


def encode_one(msg: Message, stamp_ns: int | None = None) -> bytes:
    """`encode([msg])`: the value of a per-message row. With `stamp_ns`, a message
    without `queued_at` is written as queued at that instant (UTC), with no copy
    of it made to say so: the store's stamp."""
    if _go_encode is not None:
        value = _go_encode(msg, stamp_ns)
        if value is not None:
            return value
    wire = [_wire_map(msg, 0, stamp_ns)]
    try:
        value = cbor2.dumps(wire)
    except _ENCODE_FAILURES as exc:
        raise _unencodable([msg], exc) from exc
    return _read_back(value) if msg.extra else value


def _read_back(value: bytes) -> bytes:
    """`value` once it reads back: cbor2 writes some extra values the reading
    refuses (a map keyed by an int, nesting past Go's 32 levels), and a row
    nobody can read must not be stored. The eight fields are checked before
    encoding, so only a message with extra keys needs this."""
    try:
        decode(value)
    except CodecError as exc:
        raise CodecError(f"would not read back: {exc}") from None
    return value


def _wire_map(msg: Message, index: int, stamp_ns: int | None = None) -> dict[str, Any]:
    if type(msg) is not Message and not isinstance(msg, Message):
        raise CodecError(f"message {index}: expected a Message, got {type(msg).__name__}")
    username, subject, code = msg.username, msg.subject, msg.code
    if type(username) is not str:
        raise _wrong_type(index, "Username", "a str", username)
    if type(subject) is not str:
        raise _wrong_type(index, "Subject", "a str", subject)
    if type(code) is not int:
        if type(code) is EventCode:
            code = code._value_
        elif not isinstance(code, int) or isinstance(code, bool):
            raise _wrong_type(index, "Code", "an int", code)
        else:
            code = int(code)
    if not _MIN_CODE <= code <= _MAX_CODE:
        raise CodecError(f"message {index}: Code: {code} is outside {_MIN_CODE}..{_MAX_CODE}")
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
            if _field_for(key) is not None:
                raise CodecError(f"message {index}: extra key {key!r} would be read as a field")
            wire[key] = value
    return wire


def _wire_time(time: GoTime | GoOnlyTime | datetime, index: int, name: str) -> str | None:
    if type(time) is not GoTime and type(time) is not GoOnlyTime:
        if not isinstance(time, datetime | GoOnlyTime):
            raise _wrong_type(index, name, "a datetime or None", time)
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
        raise _wrong_type(index, name, "a list of str or None", items)
    for item in items:
        if type(item) is not str:
            position = next(at for at, each in enumerate(items) if type(each) is not str)
            raise _wrong_type(index, f"{name}[{position}]", "a str", items[position])
    return items


def _unencodable(msgs: Sequence[Message], exc: Exception) -> CodecError:
    """Name the extra value cbor2 refused (the only part not checked before encoding)."""
    for index, msg in enumerate(msgs):
        for key, value in msg.extra.items():
            try:
                cbor2.dumps(value)
            except _ENCODE_FAILURES as value_exc:
                return CodecError(f"message {index}: extra key {key!r}: {value_exc}")
    return CodecError(f"cannot encode: {exc}")
