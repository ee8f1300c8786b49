"""Go's `time.Time` as users meet it: an aware `datetime` that keeps what Go wrote.

Python's `datetime` holds microseconds; Go writes up to nine fraction digits
and reads them back. `GoTime` is a `datetime` (subtraction, comparison,
`.year`, Django's `|date`, `DjangoJSONEncoder` and DRF all work on it) that
also carries the nanoseconds below the microsecond and the exact text Go
wrote, in the manner of `pandas.Timestamp`, so a time read from Go's bytes is
written back as the same bytes. The few times Go can write that `datetime`
cannot hold (a wall clock in year 0, an offset of ±24:00) are `GoOnlyTime`s.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any

from deadletter.wire import gotext
from deadletter.wire.gotext import (
    FRACTION_SCALE,
    SECONDS_OF_MINUTE_SECOND,
    VALUE_OF,
    canonical,
    duration_ns,
    epoch_ns,
    hour_of_canonical,
    known_hour,
    known_offset,
    parse_zone,
    utc_datetime,
)

__all__ = ["GoOnlyTime", "GoTime", "duration_ns", "epoch_ns", "utc_datetime"]

_NS = gotext.NS
_DAY = gotext.DAY
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_WALL_EPOCH = datetime(1970, 1, 1)
_GO_ZERO_NS = -62_135_596_800 * _NS  # 0001-01-01T00:00:00Z, Go's zero time.Time
_CACHE_LIMIT = 4096
_zones: dict[int, timezone] = {0: UTC}

_datetime_new = datetime.__new__


class GoTime(datetime):
    """An aware `datetime` that also keeps Go's nanoseconds and the text Go wrote.

    `GoTime(unix_ns, offset=0)` builds one from nanoseconds since the epoch and
    seconds east of UTC; the `datetime` signature works too (as `datetime`'s
    own arithmetic uses it). Equality and order are by instant, to the
    nanosecond between two `GoTime`s; against a plain `datetime` a `GoTime`
    with nanoseconds below the microsecond is a little later, never equal.
    Arithmetic and `replace` keep microseconds (`astimezone` and adding a
    `timedelta` keep the nanoseconds too); `format()` is Go's RFC3339Nano text.
    """

    __slots__ = ("_text", "_unix_ns")
    __match_args__ = ("unix_ns", "offset")
    _text: str | None
    _unix_ns: int

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if (args and type(args[0]) is int and len(args) <= 2 and kwargs.keys() <= {"offset"}) or (
            not args and "unix_ns" in kwargs and kwargs.keys() <= {"unix_ns", "offset"}
        ):
            built = _from_instant(*args, **kwargs)
            if type(built) is not GoTime:
                raise ValueError(f"{built!r} cannot be a datetime: use GoTime.from_unix_ns")
            return built
        if args and type(args[0]) is str:
            raise TypeError("GoTime.parse reads text; GoTime(unix_ns, offset) takes ints")
        self = _datetime_new(cls, *args, **kwargs)
        if self.utcoffset() is None:
            return datetime(*args, **kwargs)  # naive: a plain datetime, as Go has no such time
        _set_unix_ns(self, _unix_ns_of(self))
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: GoTime is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}: GoTime is immutable")

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return _restore, (self.unix_ns, self.offset, self._kept_text())

    def __reduce__(self) -> tuple[Any, ...]:
        return self.__reduce_ex__(2)

    @property
    def unix_ns(self) -> int:
        """Nanoseconds since 1970-01-01T00:00:00Z."""
        try:
            return self._unix_ns
        except AttributeError:  # made by datetime's C code without __new__ (replace)
            unix_ns = _unix_ns_of(self)
            _set_unix_ns(self, unix_ns)
            return unix_ns

    @property
    def nanosecond(self) -> int:
        """The nanoseconds below `microsecond` (0..999), as `pandas.Timestamp` names them."""
        return self.unix_ns % 1000

    @property
    def offset(self) -> int:
        """Seconds east of UTC of the zone the time is in."""
        delta: timedelta = self.utcoffset()  # type: ignore[assignment]
        return delta.days * _DAY + delta.seconds

    def _kept_text(self) -> str | None:
        try:
            return self._text
        except AttributeError:
            return None

    @classmethod
    def parse(cls, text: str) -> GoTime | GoOnlyTime:
        """Read Go's RFC3339 / RFC3339Nano text ('Z' or ±hh:mm, 0 to 9 fraction digits).

        Offsets are read in whole minutes, as the text holds them. Anything
        else raises `ValueError`, including years Go cannot write in RFC3339
        (outside 0000..9999) and values Go's parser rejects (month 13, Feb 30,
        second 60); offsets follow Go's own bounds (hours up to 24, minutes up
        to 60). A time `datetime` cannot hold comes back as a `GoOnlyTime`.
        """
        if type(text) is not str:
            raise TypeError(f"expected str, got {type(text).__name__}")
        return from_go_text(text)

    def format(self) -> str:
        """Go's `time.RFC3339Nano` text for this time, in its own offset.

        The text Go wrote when the time was read from it; otherwise trailing
        fraction zeros trimmed, a zero fraction left out, 'Z' for offset 0.
        Like Go, an offset with seconds (a zone's LMT) moves the wall clock by
        its full amount but prints only ±hh:mm.
        """
        text = self._kept_text()
        if text is None:
            text = _format(self.unix_ns, self.offset)
            _set_text(self, text)
        return text

    @classmethod
    def from_datetime(cls, dt: datetime) -> GoTime:
        """The same instant in `dt`'s zone; a naive `dt` is ambiguous: `ValueError`."""
        if isinstance(dt, GoTime):
            return dt
        utcoffset = dt.utcoffset()
        if utcoffset is None:
            raise ValueError("a naive datetime has no instant; give it a tzinfo")
        if utcoffset.microseconds:
            raise ValueError(f"UTC offset {utcoffset} is not a whole number of seconds")
        result = _datetime_new(
            GoTime,
            dt.year,
            dt.month,
            dt.day,
            dt.hour,
            dt.minute,
            dt.second,
            dt.microsecond,
            dt.tzinfo,
            fold=dt.fold,
        )
        _set_unix_ns(result, _unix_ns_of(result))
        return result

    @classmethod
    def from_unix_ns(cls, ns: int, offset: int = 0) -> GoTime | GoOnlyTime:
        """The time `ns` nanoseconds after the epoch, in the zone `offset` seconds east of UTC."""
        return _from_instant(ns, offset)

    @classmethod
    def now(cls, tz: tzinfo | None = None) -> GoTime:
        """The current instant, to the nanosecond the clock gives; UTC unless `tz` is given."""
        current = _from_instant(time.time_ns())
        assert type(current) is GoTime
        return current if tz is None else current.astimezone(tz)

    def to_datetime(self) -> datetime:
        """A plain aware `datetime` of this time, truncated to microseconds."""
        return datetime(
            self.year,
            self.month,
            self.day,
            self.hour,
            self.minute,
            self.second,
            self.microsecond,
            self.tzinfo,
            fold=self.fold,
        )

    def is_zero(self) -> bool:
        """Whether Go's `IsZero` holds: Go writes such a time as CBOR null."""
        return self.unix_ns == _GO_ZERO_NS

    def astimezone(self, tz: tzinfo | None = None) -> GoTime:
        result = datetime.astimezone(self, tz)
        if type(result) is GoTime:
            _set_unix_ns(result, self.unix_ns)
        return result

    def __add__(self, other: Any) -> Any:
        result = datetime.__add__(self, other)
        return _carry_nanoseconds(result, self)

    __radd__ = __add__

    def __sub__(self, other: Any) -> Any:
        result = datetime.__sub__(self, other)
        return _carry_nanoseconds(result, self)

    def __repr__(self) -> str:
        return f"GoTime.parse({self.format()!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, GoTime | GoOnlyTime):
            return self.unix_ns == other.unix_ns
        if isinstance(other, datetime):
            return datetime.__eq__(self, other) is True and self.unix_ns % 1000 == 0
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        nanos = self.unix_ns % 1000
        whole = datetime.__hash__(self)
        return whole if nanos == 0 else hash((whole, nanos))

    def _compare(self, other: object) -> int | None:
        if isinstance(other, GoTime | GoOnlyTime):
            mine, theirs = self.unix_ns, other.unix_ns
            return (mine > theirs) - (mine < theirs)
        if isinstance(other, datetime):
            if datetime.__lt__(self, other):
                return -1
            if datetime.__gt__(self, other):
                return 1
            return 1 if self.unix_ns % 1000 else 0
        return None

    def __lt__(self, other: object) -> bool:
        order = self._compare(other)
        return NotImplemented if order is None else order < 0

    def __le__(self, other: object) -> bool:
        order = self._compare(other)
        return NotImplemented if order is None else order <= 0

    def __gt__(self, other: object) -> bool:
        order = self._compare(other)
        return NotImplemented if order is None else order > 0

    def __ge__(self, other: object) -> bool:
        order = self._compare(other)
        return NotImplemented if order is None else order >= 0


_set_unix_ns = GoTime.__dict__["_unix_ns"].__set__
_set_text = GoTime.__dict__["_text"].__set__


class GoOnlyTime:
    """A time Go writes that `datetime` cannot hold: a wall clock in year 0 or an
    offset of ±24:00. It keeps the instant, the offset and Go's text (so it is
    written back unchanged), compares with `GoTime`s by instant, and is not a
    `datetime`: arithmetic with one is a `TypeError`.
    """

    __slots__ = ("_text", "offset", "unix_ns")
    unix_ns: int
    offset: int
    _text: str | None

    def __init__(self, unix_ns: int, offset: int = 0, text: str | None = None) -> None:
        object.__setattr__(self, "unix_ns", unix_ns)
        object.__setattr__(self, "offset", offset)
        object.__setattr__(self, "_text", text)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: GoOnlyTime is immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        return _restore, (self.unix_ns, self.offset, self._text)

    def format(self) -> str:
        """Go's RFC3339Nano text, as for `GoTime.format`."""
        text = self._text
        if text is None:
            text = _format(self.unix_ns, self.offset)
            object.__setattr__(self, "_text", text)
        return text

    def is_zero(self) -> bool:
        return self.unix_ns == _GO_ZERO_NS

    def to_datetime(self) -> datetime:
        raise ValueError(f"{self.format()} is outside the range of datetime")

    def __repr__(self) -> str:
        return f"GoOnlyTime(unix_ns={self.unix_ns!r}, offset={self.offset!r})"

    def __str__(self) -> str:
        return self.format()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, GoTime | GoOnlyTime):
            return self.unix_ns == other.unix_ns
        return NotImplemented

    def __hash__(self) -> int:
        same = _from_instant(self.unix_ns)
        return hash(same if type(same) is GoTime else self.unix_ns)

    def __lt__(self, other: object) -> bool:
        if isinstance(other, GoTime | GoOnlyTime):
            return self.unix_ns < other.unix_ns
        return NotImplemented

    def __le__(self, other: object) -> bool:
        if isinstance(other, GoTime | GoOnlyTime):
            return self.unix_ns <= other.unix_ns
        return NotImplemented

    def __gt__(self, other: object) -> bool:
        if isinstance(other, GoTime | GoOnlyTime):
            return self.unix_ns > other.unix_ns
        return NotImplemented

    def __ge__(self, other: object) -> bool:
        if isinstance(other, GoTime | GoOnlyTime):
            return self.unix_ns >= other.unix_ns
        return NotImplemented


def _restore(unix_ns: int, offset: int, text: str | None) -> GoTime | GoOnlyTime:
    return _from_instant(unix_ns, offset, text)


def _carry_nanoseconds(result: Any, source: GoTime) -> Any:
    """`result` of adding a timedelta to `source`, with `source`'s nanoseconds kept."""
    if type(result) is GoTime:
        nanos = source.unix_ns % 1000
        if nanos:
            _set_unix_ns(result, _unix_ns_of(result) + nanos)
    return result


def _unix_ns_of(dt: datetime) -> int:
    since = datetime.__sub__(dt, _EPOCH)
    return (since.days * _DAY + since.seconds) * _NS + since.microseconds * 1000


def _from_instant(unix_ns: int, offset: int = 0, text: str | None = None) -> GoTime | GoOnlyTime:
    """The time at `unix_ns` in the zone `offset` seconds east, a `GoOnlyTime` when
    `datetime` cannot hold it."""
    if text is None and _c_time is not None:
        made = _c_time(unix_ns, offset)
        if made is not None:
            return made
    if type(unix_ns) is not int or type(offset) is not int:
        raise TypeError("unix_ns and offset are ints (nanoseconds, seconds east of UTC)")
    if not -_DAY < offset < _DAY:
        return GoOnlyTime(unix_ns, offset, text)
    seconds, nanos = divmod(unix_ns, _NS)
    try:
        wall = _WALL_EPOCH + timedelta(seconds=seconds + offset, microseconds=nanos // 1000)
    except OverflowError:
        return GoOnlyTime(unix_ns, offset, text)
    zone = _zones.get(offset)
    if zone is None:
        zone = _zone(offset)
    result = _datetime_new(
        GoTime,
        wall.year,
        wall.month,
        wall.day,
        wall.hour,
        wall.minute,
        wall.second,
        wall.microsecond,
        zone,
    )
    _set_unix_ns(result, unix_ns)
    if text is not None:
        _set_text(result, text)
    return result


def from_go_text(text: str) -> GoTime | GoOnlyTime:
    """`GoTime.parse(text)` for a `str`, the codec's hot path: Go's own text is kept as is."""
    if _c_parse is not None:
        made = _c_parse(text)
        if made is not None:
            return made
    if canonical(text) is None:
        return _parse_any(text)
    year = int(text[:4])
    if text[-1] == "Z":
        offset = 0
        fraction = text[20:-1]
    else:
        zone = text[-6:]
        cached = known_offset(zone)
        offset = parse_zone(zone) if cached is None else cached
        fraction = text[20:-6]
    if year == 0 or not -_DAY < offset < _DAY:
        unix_ns, offset = gotext.instant(text)
        return GoOnlyTime(unix_ns, offset, text)
    wall = known_hour(text[:13])
    if wall is None:
        wall = hour_of_canonical(text)
    nanos = int(fraction) * FRACTION_SCALE[len(fraction)] if fraction else 0
    zone_info = _zones.get(offset)
    if zone_info is None:
        zone_info = _zone(offset)
    result = _datetime_new(
        GoTime,
        year,
        VALUE_OF[text[5:7]],
        VALUE_OF[text[8:10]],
        VALUE_OF[text[11:13]],
        VALUE_OF[text[14:16]],
        VALUE_OF[text[17:19]],
        nanos // 1000,
        zone_info,
    )
    _set_unix_ns(result, (wall + SECONDS_OF_MINUTE_SECOND[text[14:19]] - offset) * _NS + nanos)
    _set_text(result, text)
    return result


def _parse_any(text: str) -> GoTime | GoOnlyTime:
    """Any RFC 3339 text Go's parser reads; written back later in Go's canonical form."""
    unix_ns, offset = gotext.parse(text)
    return _from_instant(unix_ns, offset)


def _format(unix_ns: int, offset: int) -> str:
    if _c_format is not None:
        text = _c_format(unix_ns, offset)
        if text is not None:
            return text
    return gotext.format_text(unix_ns, offset)


def _zone(offset: int) -> timezone:
    zone = UTC if offset == 0 else timezone(timedelta(seconds=offset))
    if len(_zones) >= _CACHE_LIMIT:
        _zones.clear()
    _zones[offset] = zone
    return zone


def _load_speedups() -> Any:
    """`deadletter.wire._speedups` with `GoTime` set up in it, or None when the C
    extension was not compiled (the Python code then does it all); `codec` sets
    up the message side of it."""
    try:
        from deadletter.wire import _speedups
    except ImportError:
        return None
    _speedups.setup_time(GoTime)
    return _speedups


speedups = _load_speedups()
# Each returns None for what the Python code above must make (or refuse).
_c_time = speedups and speedups.go_time
_c_format = speedups and speedups.format_time
_c_parse = speedups and speedups.parse_time


@contextlib.contextmanager
def python_only() -> Iterator[None]:
    """The Python code alone makes, reads and writes times for the block (with
    `codec.python_only`, for benchmarks and tests); not thread-safe."""
    global _c_time, _c_format, _c_parse
    saved = _c_time, _c_format, _c_parse
    _c_time = _c_format = _c_parse = None
    try:
        yield
    finally:
        _c_time, _c_format, _c_parse = saved
