"""The C reading and writing of Go's message shape (wire/_speedups.c) agree with Python's.

The extension may only ever say "this is exactly Go's shape, and here is the
same Message (or the same bytes) the Python code would give"; everything
else it hands back to the Python code. Every test here compares the two.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import sys
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

import cbor2
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from deadletter.wire import codec, gotime, reading
from deadletter.wire.codec import CodecError
from deadletter.wire.gotext import canonical as _canonical
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import EventCode, Message
from tests.wire.test_codec import (
    ALL_FIXTURES,
    FIELD_NAMES,
    FIXTURE_VALUES,
    field_values,
    fixture_id,
    fresh_copy,
    outcome,
    wire_map,
)

NS = 1_000_000_000
# The seconds whose nanoseconds fit in 64 bits: the extension's time range.
MAX_SECONDS = (2**63 - 1) // NS - 1


def _import_speedups() -> ModuleType:
    try:
        from deadletter.wire import _speedups
    except ImportError:
        if os.environ.get("DEADLETTER_REQUIRE_SPEEDUPS"):
            raise
        pytest.skip("the C extension is not built (pip install -e . builds it)")
    return _speedups


@pytest.fixture(scope="module")
def speedups() -> ModuleType:
    return _import_speedups()


def read_by_c(speedups: ModuleType, item: Any) -> Any:
    """What `go_message` gives for a fresh copy of `item`: None or an outcome."""
    copy = fresh_copy(item) if type(item) is dict else item
    msg = speedups.go_message(copy)
    return None if msg is None else outcome(lambda: msg)


def python_reading(item: Any) -> Any:
    return outcome(lambda: reading.message(fresh_copy(item) if type(item) is dict else item, 0))


def read_time_by_c(speedups: ModuleType, text: Any) -> tuple[int, int] | None:
    """The instant and offset of the time `parse_time` makes of `text`, or None."""
    made = speedups.parse_time(text)
    return None if made is None else (made.unix_ns, made.offset)


def expected_time(text: str) -> tuple[int, int] | None:
    """What C must read: the instant of canonical text in its range, else None."""
    if type(text) is not str or _canonical(text) is None or text < "0002":
        return None
    with gotime.python_only():
        time = GoTime.parse(text)
    if abs(time.unix_ns // NS) > MAX_SECONDS or abs(time.offset) >= 86_400:
        return None
    return time.unix_ns, time.offset


def test_the_codec_uses_the_extension(speedups: ModuleType) -> None:
    assert codec._go_message is speedups.go_message
    assert codec._go_decode is speedups.go_decode


@pytest.mark.parametrize(
    "entry_value",
    list(zip(ALL_FIXTURES, FIXTURE_VALUES, strict=True)),
    ids=[fixture_id(e) for e in ALL_FIXTURES],
)
def test_every_go_fixture_message_reads_as_the_python_code_reads_it(
    speedups: ModuleType, entry_value: tuple[dict[str, Any], bytes]
) -> None:
    _, value = entry_value
    items = cbor2.loads(value) or []
    for item in items:
        by_c = read_by_c(speedups, item)
        assert by_c is None or by_c == python_reading(item)


def test_go_written_messages_take_the_c_path(speedups: ModuleType) -> None:
    taken = sum(
        speedups.go_message(item) is not None
        for value in FIXTURE_VALUES
        for item in (cbor2.loads(value) or [])
    )
    assert taken >= 5


def test_a_typical_row_is_read_by_c_with_times_worked_out(speedups: ModuleType) -> None:
    item = wire_map(
        Timestamp="2026-11-29T15:47:12.123456789+01:00",
        QueuedAt="2026-11-29T14:47:13Z",
        Username="ana@skole.hr",
        Subject="Ocjena: Matematika",
        Descriptions=["Datum", "Ocjena"],
        Fields=["27.11.2026.", "5"],
        Code=3,
    )
    msg = speedups.go_message(item)
    assert type(msg) is Message
    assert msg == reading.message(fresh_copy(item), 0)
    assert msg.code is EventCode.FINAL_GRADE
    assert msg.timestamp == GoTime.parse("2026-11-29T15:47:12.123456789+01:00")
    assert msg.timestamp.format() == "2026-11-29T15:47:12.123456789+01:00"
    assert msg.queued_at.unix_ns == GoTime.parse("2026-11-29T14:47:13Z").unix_ns
    assert msg.extra == {} and msg.extra is not speedups.go_message(item).extra


@pytest.mark.parametrize(
    "item",
    [
        {**wire_map(), "subject": "a key Go reads as a field"},
        {**wire_map(), "KELVIN": 1, "codE": 2},
        {"Extra": "before Go's keys", **wire_map()},
        {name: wire_map()[name] for name in reversed(FIELD_NAMES)},
        {**{n.lower(): v for n, v in wire_map().items()}},
        wire_map(Username=None),
        wire_map(Code=True),
        wire_map(Code=-(2**63) - 1),
        wire_map(Code=2**63),
        wire_map(Fields=["a", None]),
        wire_map(Fields=("a",)),
        wire_map(QueuedAt="0001-01-01T00:00:00Z"),
        wire_map(QueuedAt="2026-11-29T15:47:12.500Z"),
        wire_map(QueuedAt="2300-01-01T00:00:00Z"),
        wire_map(Timestamp=cbor2.CBORTag(1, 0)),
        wire_map(Timestamp=1_700_000_000),
        [wire_map()],
        "not a map",
    ],
    ids=lambda item: repr(item)[:40],
)
def test_anything_but_gos_exact_shape_is_left_to_the_python_code(
    speedups: ModuleType, item: Any
) -> None:
    assert speedups.go_message(item) is None


@settings(max_examples=2000 * settings.default.max_examples // 100, deadline=None)
@given(st.lists(field_values, min_size=8, max_size=8))
def test_any_field_values_read_by_c_read_the_same_in_python(values: list[Any]) -> None:
    speedups = _import_speedups()
    item = dict(zip(FIELD_NAMES, values, strict=True))
    by_c = read_by_c(speedups, item)
    assert by_c is None or by_c == python_reading(item)


digits = st.integers(0, 99).map(lambda n: f"{n:02d}")
near_canonical_times = st.builds(
    lambda year, month, day, hour, minute, second, fraction, zone: (
        f"{year:04d}-{month}-{day}T{hour}:{minute}:{second}{fraction}{zone}"
    ),
    st.integers(0, 9999) | st.sampled_from([0, 1, 2, 1677, 1678, 2262, 2263, 2000, 2100]),
    st.integers(0, 13).map(lambda n: f"{n:02d}"),
    st.integers(0, 32).map(lambda n: f"{n:02d}"),
    st.integers(0, 25).map(lambda n: f"{n:02d}"),
    st.integers(0, 61).map(lambda n: f"{n:02d}"),
    st.integers(0, 61).map(lambda n: f"{n:02d}"),
    st.just("") | st.text("0123456789", max_size=11).map(lambda s: "." + s),
    st.sampled_from(["Z", "z", "", "+00:00", "-00:00", "+24:00", "+24:59", "+25:00", "-00:01"])
    | st.builds(lambda sign, h, m: f"{sign}{h}:{m}", st.sampled_from("+-"), digits, digits),
)


@settings(max_examples=3000 * settings.default.max_examples // 100, deadline=None)
@given(near_canonical_times)
def test_a_time_is_read_by_c_exactly_when_the_python_code_reads_it_as_canonical(
    text: str,
) -> None:
    assert read_time_by_c(_import_speedups(), text) == expected_time(text)


@settings(max_examples=1000 * settings.default.max_examples // 100, deadline=None)
@given(
    near_canonical_times.flatmap(
        lambda text: st.tuples(st.integers(0, len(text)), st.characters(codec="utf-8")).map(
            lambda cut: text[: cut[0]] + cut[1] + text[cut[0] + 1 :]
        )
    )
    | st.text(max_size=40)
)
def test_a_mangled_time_is_read_by_c_only_if_it_is_still_canonical(text: str) -> None:
    assert read_time_by_c(_import_speedups(), text) == expected_time(text)


@pytest.mark.parametrize(
    "text",
    [
        "1677-09-21T00:12:44Z",
        "1677-09-21T00:12:43.145224192Z",
        "2262-04-11T23:47:16.854775807Z",
        "2262-04-11T23:47:17Z",
        "2262-04-12T00:47:16+01:00",
        "2000-02-29T00:00:00Z",
        "2100-02-29T00:00:00Z",
        "0002-01-01T00:00:00Z",
    ],
)
def test_the_edges_of_the_c_time_range_read_as_python_reads_them(
    speedups: ModuleType, text: str
) -> None:
    assert read_time_by_c(speedups, text) == expected_time(text)


@pytest.mark.heavy
def test_reading_and_writing_leak_no_objects(speedups: ModuleType) -> None:
    item = wire_map(
        Timestamp="2026-11-29T15:47:12.123456789+01:00",
        QueuedAt="2026-11-29T14:47:13Z",
        Username="ana",
        Descriptions=["a"],
        Fields=[],
        Code=7,
    )
    text = item["QueuedAt"]
    msg = codec.decode(cbor2.dumps([item]))[0]
    odd = msg.replace(extra={"Attempts": 2, "Score": float("nan")})
    users = msg.replace(extra={"Endpoint": "https://x", "Ids": [1, -2, 3.5], "Raw": {b"k": None}})
    users_row = codec.encode_one(users)
    users_item = cbor2.loads(users_row)[0]
    damaged = users_row[:-3] + b"\xf7" + users_row[-2:]
    references = sys.getrefcount(text), sys.getrefcount(item["Descriptions"])
    for _ in range(1000):
        speedups.go_message(item)
        speedups.go_encode(msg)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(20_000):
            speedups.go_message(item)
            speedups.go_message(wire_map(QueuedAt="yesterday"))
            speedups.parse_time(text)
            speedups.go_encode(msg)
            speedups.go_encode(odd)
            speedups.go_encode(users)
            speedups.go_message(users_item)
            speedups.go_decode(users_row)
            speedups.go_decode(damaged)
        gc.collect()
        growth = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert growth < 20_000  # 180,000 calls: a leak of even one object per call is > 1 MB
    assert (sys.getrefcount(text), sys.getrefcount(item["Descriptions"])) == references


def test_the_python_code_alone_reads_every_fixture_the_same(speedups: ModuleType) -> None:
    with_c = [codec.decode(value) for value in FIXTURE_VALUES]
    with codec.python_only():
        assert [codec.decode(value) for value in FIXTURE_VALUES] == with_c


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ((Message, GoTime, {}, ("a",) * 7, ("a",) * 9, EventCode), ValueError),
        ((Message, GoTime, {}, (1,) * 8, ("a",) * 9, EventCode), TypeError),
        ((Message, GoTime, [], ("a",) * 8, ("a",) * 9, EventCode), TypeError),
        (("Message", GoTime, {}, ("a",) * 8, ("a",) * 9, EventCode), TypeError),
        ((Message, GoTime, {}, ("a",) * 8, ("a",) * 9, "EventCode"), TypeError),
    ],
)
def test_setup_refuses_what_go_message_cannot_build_with(
    speedups: ModuleType, arguments: tuple[Any, ...], error: type[Exception]
) -> None:
    with pytest.raises(error):
        speedups.setup(*arguments)
    assert speedups.go_message(wire_map()) == Message()
    assert speedups.go_encode(Message()) == written_by_python(Message())


# --- writing ----------------------------------------------------------------------------------


@contextlib.contextmanager
def python_encoder() -> Iterator[None]:
    saved = codec._go_encode
    codec._go_encode = None
    try:
        yield
    finally:
        codec._go_encode = saved


def written_by_python(msg: Any) -> Any:
    with python_encoder():
        try:
            return codec.encode_one(msg)
        except CodecError as exc:
            return ("refused", str(exc))


@pytest.mark.parametrize("value", FIXTURE_VALUES, ids=[fixture_id(e) for e in ALL_FIXTURES])
def test_every_go_fixture_message_is_written_as_the_python_code_writes_it(
    speedups: ModuleType, value: bytes
) -> None:
    for msg in codec.decode(value):
        written = speedups.go_encode(msg)
        assert written is None or written == written_by_python(msg)


def test_a_typical_message_is_written_by_c(speedups: ModuleType) -> None:
    msg = Message(
        timestamp=GoTime.parse("2026-11-29T15:47:12.123456789+01:00"),
        queued_at=GoTime.now(),
        username="učenik@skole.hr",
        subject="Ocjena: Matematika" * 20,
        descriptions=["Datum", "Ocjena"],
        fields=[],
        code=EventCode.NATIONAL_EXAM,
    )
    written = speedups.go_encode(msg)
    assert written is not None
    assert written == written_by_python(msg)
    assert codec.decode(written) == [msg]


@pytest.mark.parametrize(
    "msg",
    [
        Message(extra={"Score": float("nan")}),
        Message(extra={"Score": float("inf")}),
        Message(extra={"Big": 2**64}),
        Message(extra={"Tag": cbor2.CBORTag(1, 0)}),
        Message(extra={"Pair": (1, 2)}),
        Message(extra={"Code": 1}),
        Message(extra={1: "a key that is not a str"}),  # type: ignore[dict-item]
        Message(extra={"Lone": "\ud800"}),
        Message(extra={"Deep": [[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]}),
        Message(code=-(2**63) - 1),
        Message(code=2**63),
        Message(username="\ud800"),
        Message(fields=("a",)),
        Message(fields=["a", 1]),
        Message(queued_at=GoTime.parse("0001-01-01T00:00:00Z")),
        Message(queued_at=GoTime.from_unix_ns(-(10**20))),
    ],
    ids=repr,
)
def test_anything_but_gos_exact_shape_is_left_to_the_python_encoder(
    speedups: ModuleType, msg: Message
) -> None:
    assert speedups.go_encode(msg) is None


def test_values_set_after_construction_are_judged_by_the_python_encoder(
    speedups: ModuleType,
) -> None:
    msg = Message()
    msg.code = True  # type: ignore[assignment]
    assert speedups.go_encode(msg) is None
    msg.code = 0
    msg.queued_at = datetime(2026, 11, 29, tzinfo=UTC)  # type: ignore[assignment]
    assert speedups.go_encode(msg) is None


class SubMessage(Message):
    pass


def test_a_message_subclass_is_left_to_the_python_encoder(speedups: ModuleType) -> None:
    assert speedups.go_encode(SubMessage()) is None
    assert codec.encode_one(SubMessage()) == codec.encode_one(Message())


plain_scalars = (
    st.booleans()
    | st.integers(-(2**64), 2**64)
    | st.floats()
    | st.text(max_size=20)
    | st.binary(max_size=20)
)
plain_values = st.recursive(
    plain_scalars | st.none(),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=5) | st.integers(-5, 5), inner, max_size=3)
    ),
    max_leaves=8,
)
user_keys = st.text(max_size=12).filter(
    lambda key: key.isascii() is False or reading.field_for(key) is None
)

go_times = st.none() | st.builds(
    GoTime.from_unix_ns,
    st.integers(-(2**63), 2**63 - 1) | st.integers(-(10**20), 10**20),
    st.integers(-86_400, 86_400) | st.sampled_from([0, 3600, -12_600, 19_800]),
)
texts = st.text(max_size=30) | st.text(max_size=300)
text_lists = st.none() | st.lists(texts, max_size=4)
message_values = st.builds(
    Message,
    timestamp=go_times,
    queued_at=go_times,
    username=texts,
    subject=texts,
    descriptions=text_lists,
    fields=text_lists,
    skip_recipients=text_lists,
    code=st.integers(-(2**64), 2**64)
    | st.sampled_from([0, -1, -24, -25, 23, 24, 255, 256, 65535, 65536, 2**32, -(2**63)]),
    extra=st.just({})
    | st.dictionaries(st.sampled_from(["Attempts", "LastError"]), texts)
    | st.dictionaries(st.text(max_size=12), st.none() | plain_values, max_size=4),
)


@settings(max_examples=2000 * settings.default.max_examples // 100, deadline=None)
@given(message_values)
def test_any_message_written_by_c_is_written_the_same_by_python(msg: Message) -> None:
    written = _import_speedups().go_encode(msg)
    assert written is None or written == written_by_python(msg)


@settings(max_examples=500 * settings.default.max_examples // 100, deadline=None)
@given(message_values)
def test_a_message_go_could_have_written_is_written_by_c(msg: Message) -> None:
    shaped = (
        all(is_extra_key(key) and is_plain(value) for key, value in msg.extra.items())
        and -(2**63) <= msg.code < 2**63
        and all(
            time is None or (type(time) is GoTime and _formats(time) and time.format() >= "0002")
            for time in (msg.timestamp, msg.queued_at)
        )
    )
    written = _import_speedups().go_encode(msg)
    assert (written is not None) == shaped


def is_extra_key(key: Any) -> bool:
    return type(key) is str and _utf8(key) and reading.field_for(key) is None


def is_plain(value: Any, depth: int = 0) -> bool:
    """The values go_encode writes itself, as its comment lists them."""
    if value is None or type(value) in (bool, bytes):
        return True
    if type(value) is int:
        return -(2**63) <= value < 2**63
    if type(value) is float:
        return math.isfinite(value)
    if type(value) is str:
        return _utf8(value)
    if depth >= 16:
        return False
    if type(value) is list:
        return all(is_plain(item, depth + 1) for item in value)
    if type(value) is dict:
        return all(
            type(k) in (str, bytes) and is_plain(k, depth + 1) and is_plain(v, depth + 1)
            for k, v in value.items()
        )
    return False


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _formats(time: GoTime) -> bool:
    try:
        time.format()
    except ValueError:
        return False
    return True


# --- messages of the user's own shape: Go's eight keys, then keys of its own ------------


@settings(max_examples=2000 * settings.default.max_examples // 100, deadline=None)
@given(
    st.lists(field_values, min_size=8, max_size=8),
    st.dictionaries(user_keys, plain_values, max_size=4),
)
def test_a_users_message_reads_the_same_by_c_by_the_fast_python_path_and_by_the_general_one(
    values: list[Any], own: dict[str, Any]
) -> None:
    speedups = _import_speedups()
    item = {**dict(zip(FIELD_NAMES, values, strict=True)), **own}
    by_c = read_by_c(speedups, item)
    by_python = python_reading(item)
    assert by_c is None or by_c == by_python
    assert by_python == outcome(lambda: reading.generic_message(fresh_copy(item), 0))


def test_a_typical_users_message_is_written_and_read_back_by_c(speedups: ModuleType) -> None:
    msg = Message(
        timestamp=GoTime.parse("2026-11-29T15:47:12.123456789+01:00"),
        queued_at=GoTime.now(),
        subject="POST https://hooks.example.com/orders failed",
        code=EventCode.EXAM,
        extra={
            "Endpoint": "https://hooks.example.com/orders",
            "OrderID": 81723,
            "Retry": True,
            "Body": b"\x00\x01",
            "Tries": [1.5, None, {"at": -3, b"k": "x"}],
        },
    )
    written = speedups.go_encode(msg)
    assert written is not None and written == written_by_python(msg)
    (item,) = cbor2.loads(written)
    assert list(item)[8:] == ["Endpoint", "OrderID", "Retry", "Body", "Tries"]
    for read in (speedups.go_message(item), speedups.go_decode(written)):
        assert read == msg and list(read.extra) == list(msg.extra)
        assert type(read.timestamp) is GoTime
        assert read.timestamp.format() == msg.timestamp.format()
        assert read.code is EventCode.EXAM


@settings(max_examples=1000 * settings.default.max_examples // 100, deadline=None)
@given(st.dictionaries(user_keys, plain_values, max_size=5), st.randoms())
def test_plain_values_in_any_key_order_are_written_by_c_as_cbor2_writes_them(
    own: dict[str, Any], random: Any
) -> None:
    keys = list(own)
    random.shuffle(keys)
    msg = Message(subject="s", extra={key: own[key] for key in keys})
    written = _import_speedups().go_encode(msg)
    shaped = all(is_extra_key(key) and is_plain(value) for key, value in msg.extra.items())
    assert (written is not None) == shaped
    if written is not None:
        assert written == written_by_python(msg)
        assert list(cbor2.loads(written)[0])[8:] == keys


# --- reading a row's bytes straight off (go_decode) -----------------------------------------


def read_off_bytes_by_c(speedups: ModuleType, value: bytes) -> str | None:
    """What `go_decode` gives for `value`: None or an outcome, as text so that a
    NaN compares equal to a NaN and 1 differs from 1.0 and True."""
    msg = speedups.go_decode(value)
    return None if msg is None else repr(outcome(lambda: msg))


def python_reading_of(value: bytes) -> str:
    """cbor2 and the Python reading of a per-message row, the C code switched off."""
    with codec.python_only():
        return repr(outcome(lambda: codec.decode(value)[0]))


@pytest.mark.parametrize("value", FIXTURE_VALUES, ids=[fixture_id(e) for e in ALL_FIXTURES])
def test_every_go_fixture_row_read_off_its_bytes_reads_as_python_reads_it(
    speedups: ModuleType, value: bytes
) -> None:
    by_c = read_off_bytes_by_c(speedups, value)
    assert by_c is None or by_c == python_reading_of(value)


def test_go_written_rows_are_read_off_their_bytes_by_c(speedups: ModuleType) -> None:
    per_message = [value for value in FIXTURE_VALUES if len(cbor2.loads(value) or []) == 1]
    assert per_message
    by_c = [speedups.go_decode(value) for value in per_message]
    assert None not in by_c
    assert [codec.decode_single(value) for value in per_message] == by_c


@settings(max_examples=2000 * settings.default.max_examples // 100, deadline=None)
@given(message_values)
def test_a_message_go_could_have_written_is_read_off_its_bytes_by_c_as_python_reads_it(
    msg: Message,
) -> None:
    speedups = _import_speedups()
    value = written_by_python(msg)
    assume(type(value) is bytes)
    by_c = read_off_bytes_by_c(speedups, value)
    assert by_c is None or by_c == python_reading_of(value)
    readable = (
        all(is_extra_key(key) and is_plain(own) for key, own in msg.extra.items())
        and -(2**63) <= msg.code < 2**63
        and all(
            t is None or (_formats(t) and expected_time(t.format()))
            for t in (msg.timestamp, msg.queued_at)
        )
    )
    if readable:
        assert by_c is not None


@settings(max_examples=2000 * settings.default.max_examples // 100, deadline=None)
@given(
    st.lists(field_values, min_size=8, max_size=8),
    st.dictionaries(user_keys, plain_values, max_size=4),
    st.booleans(),
)
def test_any_map_cbor2_writes_is_read_off_its_bytes_by_c_as_python_reads_it(
    values: list[Any], own: dict[str, Any], shortest: bool
) -> None:
    item = {**dict(zip(FIELD_NAMES, values, strict=True)), **own}
    value = cbor2.dumps([item], canonical=shortest)  # canonical: half and single floats
    by_c = read_off_bytes_by_c(_import_speedups(), value)
    assert by_c is None or by_c == python_reading_of(value)


@settings(max_examples=3000 * settings.default.max_examples // 100, deadline=None)
@given(message_values, st.data())
def test_a_damaged_row_is_read_by_c_only_as_python_reads_it(msg: Message, data: Any) -> None:
    """Bytes flipped, cut out or put in anywhere: the C reading never says
    more than "exactly what Python reads" (a refusal included: it then says None)."""
    written = written_by_python(msg)
    assume(type(written) is bytes)
    value = bytearray(written)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(value) - 1))
        change = data.draw(st.sampled_from(["flip", "cut", "put"]))
        if change == "flip":
            value[at] ^= data.draw(st.integers(1, 255))
        elif change == "cut" and len(value) > 2:
            del value[at]
        else:
            value.insert(at, data.draw(st.integers(0, 255)))
    by_c = read_off_bytes_by_c(_import_speedups(), bytes(value))
    assert by_c is None or by_c == python_reading_of(bytes(value))


@pytest.mark.parametrize(
    "tail",
    [
        b"\x00",  # a byte after the message
        b"",
    ],
)
def test_bytes_after_the_message_are_left_to_the_python_reading(
    speedups: ModuleType, tail: bytes
) -> None:
    value = written_by_python(Message(subject="s")) + tail
    assert (speedups.go_decode(value) is None) == bool(tail)


@pytest.mark.parametrize(
    ("what", "pairs", "extra"),
    [
        ("a repeated key", 2, b"\x61k\x01\x61k\x02"),
        ("a tag", 1, b"\x61k\xc1\x01"),
        ("an undefined", 1, b"\x61k\xf7"),
        ("a simple value", 1, b"\x61k\xf8\x20"),
        ("an indefinite text", 1, b"\x61k\x7f\x61a\xff"),
        ("a map keyed by a list", 1, b"\x61k\xa1\x80\x01"),
        ("a negative int past 64 bits", 1, b"\x61k\x3b\xff\xff\xff\xff\xff\xff\xff\xff"),
        ("text that is not UTF-8", 1, b"\x61k\x62\xc3\x28"),
        ("a key Go takes", 1, b"\x64code\x01"),
    ],
)
def test_anything_but_plain_values_is_left_to_the_python_reading(
    speedups: ModuleType, what: str, pairs: int, extra: bytes
) -> None:
    base = bytearray(written_by_python(Message(subject="s")))
    assert base[1] == 0xA8  # Go's eight keys
    value = bytes(base[:1]) + bytes([0xA8 + pairs]) + bytes(base[2:]) + extra
    assert speedups.go_decode(value) is None
    with_c = outcome(lambda: codec.decode(value)[0])
    with codec.python_only():
        assert outcome(lambda: codec.decode(value)[0]) == with_c
