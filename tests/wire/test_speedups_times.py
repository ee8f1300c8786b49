"""Times made, written and read in C (wire/_speedups.c) are the ones the Python code makes.

`go_time`, `format_time` and `parse_time` may only answer "here is exactly what
gotime's Python code gives" or None; `go_encode` with a stamp writes what the
Python encoder writes for the message stamped, and leaves the message alone.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deadletter.wire import codec, gotime
from deadletter.wire.gotime import GoOnlyTime, GoTime
from deadletter.wire.messages import Message
from tests.wire.test_speedups import _import_speedups, near_canonical_times, written_by_python

NS = 1_000_000_000
I64 = 2**63


@pytest.fixture(scope="module")
def speedups() -> ModuleType:
    return _import_speedups()


def by_python(make: Any) -> Any:
    """What gotime's Python code alone gives (or raises) for `make()`."""
    with gotime.python_only():
        try:
            return make()
        except (ValueError, TypeError, OverflowError) as exc:
            return type(exc)


def described(time: Any) -> Any:
    """Everything a time carries: its type, instant, offset, wall clock and kept text."""
    if isinstance(time, GoTime):
        wall = (time.year, time.month, time.day, time.hour, time.minute, time.second)
        return (GoTime, time.unix_ns, time.offset, wall, time.microsecond, time._kept_text())
    if isinstance(time, GoOnlyTime):
        return (GoOnlyTime, time.unix_ns, time.offset, time._text)
    return time


instants = st.one_of(
    st.integers(-I64, I64 - 1),
    st.integers(-(10**19), 10**19),
    st.integers(-62_135_596_800 * NS - 86_400 * NS, -62_135_596_800 * NS + 86_400 * NS),
    st.integers(253_402_300_799 * NS - 86_400 * NS, 253_402_300_799 * NS + 86_400 * NS),
    st.integers(0, 4_102_444_800 * NS),
)
offsets = st.one_of(
    st.integers(-24 * 60, 24 * 60).map(lambda minutes: minutes * 60),
    st.integers(-86_401, 86_401),
    st.sampled_from([0, -30, -59, -60, -61, 59, 60, 86_399, -86_399, 86_400, -86_400]),
)


@settings(max_examples=3000 * settings.default.max_examples // 100, deadline=None)
@given(instants, offsets)
def test_a_time_formatted_by_c_is_the_text_python_writes(unix_ns: int, offset: int) -> None:
    text = _import_speedups().format_time(unix_ns, offset)
    if text is not None:
        assert text == by_python(lambda: gotime._format(unix_ns, offset))


@settings(max_examples=3000 * settings.default.max_examples // 100, deadline=None)
@given(instants, offsets)
def test_a_time_made_by_c_is_the_one_the_python_code_makes(unix_ns: int, offset: int) -> None:
    made = _import_speedups().go_time(unix_ns, offset)
    if made is not None:
        assert described(made) == described(by_python(lambda: GoTime.from_unix_ns(unix_ns, offset)))


@settings(max_examples=3000 * settings.default.max_examples // 100, deadline=None)
@given(near_canonical_times)
def test_a_time_read_by_c_is_the_one_the_python_code_reads(text: str) -> None:
    made = _import_speedups().parse_time(text)
    if made is not None:
        assert described(made) == described(by_python(lambda: GoTime.parse(text)))


def test_the_times_a_queue_meets_are_made_in_c(speedups: ModuleType) -> None:
    now = 1_764_600_000_123_456_789
    assert speedups.go_time(now) is not None
    assert speedups.go_time(now, 3600) is not None
    assert speedups.format_time(now) == "2025-12-01T14:40:00.123456789Z"
    assert speedups.parse_time("2026-11-29T15:47:12.123456789+01:00") is not None
    assert speedups.parse_time("2026-11-29T15:47:12Z").format() == "2026-11-29T15:47:12Z"


@pytest.mark.parametrize(
    "arguments",
    [(1.5,), (True,), ("1",), (1, 1.0), (1, True), (2**64,), (1, 2**64), (), (1, 2, 3)],
)
def test_what_is_not_two_plain_ints_is_left_to_the_python_code(
    speedups: ModuleType, arguments: tuple[Any, ...]
) -> None:
    assert speedups.go_time(*arguments) is None
    assert speedups.format_time(*arguments) is None


def test_the_python_code_alone_makes_every_time_the_same() -> None:
    now = GoTime.now().unix_ns
    cases = [(now, 0), (now, 19_800), (now, -25_200), (0, 0), (-1, -30), (now, 45)]
    with_c = [described(GoTime.from_unix_ns(ns, offset)) for ns, offset in cases]
    texts = [GoTime.from_unix_ns(ns, offset).format() for ns, offset in cases]
    with gotime.python_only():
        assert gotime._c_time is gotime._c_format is gotime._c_parse is None
        assert [described(GoTime.from_unix_ns(ns, offset)) for ns, offset in cases] == with_c
        assert [GoTime.from_unix_ns(ns, offset).format() for ns, offset in cases] == texts
    assert gotime._c_time is not None


# --- the store's stamp -------------------------------------------------------------------


stamps = st.one_of(
    st.integers(0, 4_102_444_800 * NS),
    st.integers(-I64, I64 - 1),
    st.sampled_from([0, 1, 10**9, -62_135_596_800 * NS, 253_402_300_799 * NS + NS - 1]),
)


@settings(max_examples=1000 * settings.default.max_examples // 100, deadline=None)
@given(stamps)
def test_a_message_stamped_by_c_is_written_as_python_writes_it_stamped(stamp: int) -> None:
    msg = Message(subject="s", username="u", descriptions=["a"], extra={"endpoint": "x"})
    written = _import_speedups().go_encode(msg, stamp)
    assert msg.queued_at is None
    if written is not None:
        stamped = msg.replace(queued_at=GoTime.from_unix_ns(stamp))
        assert written == written_by_python(stamped)
        assert codec.decode(written)[0].queued_at.unix_ns == stamp


def test_the_stamp_leaves_a_message_with_its_own_queued_at_as_it_is(speedups: ModuleType) -> None:
    msg = Message(subject="s", queued_at=GoTime.parse("2026-11-29T14:47:13Z"))
    assert speedups.go_encode(msg, GoTime.now().unix_ns) == speedups.go_encode(msg)


def test_the_python_encoder_stamps_as_c_does() -> None:
    msg = Message(subject="s", extra={"endpoint": "x"})
    stamp = GoTime.now().unix_ns
    with codec.python_only():
        by_python_alone = codec.encode_one(msg, stamp)
    assert codec.encode_one(msg, stamp) == by_python_alone
    assert msg.queued_at is None
