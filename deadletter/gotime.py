"""Go's `time.Time` as it travels in the queue: an instant in nanoseconds plus its UTC offset.

Python's `datetime` keeps microseconds, while Go writes up to nine fraction
digits and reads them back: a value that passed through `datetime` would no
longer match the bytes Go wrote. `GoTime` keeps exactly what Go's
RFC3339Nano text holds, with integer calendar arithmetic (no `datetime` on
the hot path), so `GoTime.parse(s).format() == s` for every string Go writes.
"""

from __future__ import annotations

import re
import time
from dataclasses import FrozenInstanceError
from datetime import UTC, datetime, timedelta, timezone
from functools import lru_cache
from typing import Any

__all__ = ["GoTime"]

_NS = 1_000_000_000
_DAY = 86_400
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_GO_ZERO_NS = -62_135_596_800 * _NS  # 0001-01-01T00:00:00Z, Go's zero time.Time
_FRACTION_SCALE = tuple(10 ** (9 - digits) for digits in range(10))
_DAYS_IN_MONTH = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)

_RFC3339 = re.compile(
    r"(\d{4}-\d\d-\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(?:Z|([+-]\d\d:\d\d))",
    re.ASCII,
)
# Exactly the text `format()` writes: a real calendar date (Feb 29 only in
# leap years), a time of day, a fraction without trailing zeros, 'Z' for
# offset 0 and ±hh:mm otherwise, within Go's offset bounds. Such text is kept
# and read lazily; anything else goes through `_RFC3339` and is checked there.
_CANONICAL_DATE = (
    r"(?:\d{4}-(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1\d|2[0-8])"
    r"|(?:0[13-9]|1[0-2])-(?:29|30)"
    r"|(?:0[13578]|1[02])-31)"
    r"|(?:\d\d(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29)"
)
_CANONICAL_TAIL = (
    r":[0-5]\d:[0-5]\d(?:\.\d{0,8}[1-9])?"
    r"(?:Z|[+-](?:(?:0[1-9]|1\d|2[0-4]):[0-5]\d|00:(?:0[1-9]|[1-5]\d)))"
)
_canonical = re.compile(
    _CANONICAL_DATE + r"T(?:[01]\d|2[0-3])" + _CANONICAL_TAIL, re.ASCII
).fullmatch
# The same after a checked "YYYY-MM-DDTHH" (use with pos=13).
_canonical_tail = re.compile(_CANONICAL_TAIL, re.ASCII).fullmatch
_TWO_DIGITS = tuple(f"{number:02d}" for number in range(100))
_VALUE_OF = {text: number for number, text in enumerate(_TWO_DIGITS)}
_SECONDS_OF_MINUTE_SECOND = {
    f"{minute:02d}:{second:02d}": minute * 60 + second
    for minute in range(60)
    for second in range(60)
}

# Times in one queue share few dates and offsets: their text is computed once.
_CACHE_LIMIT = 4096
_days_of_date: dict[str, int] = {}
_date_of_days: dict[int, str] = {}
_offset_of_zone: dict[str, int] = {}
_seconds_of_hour: dict[str, int] = {}
_zone_of_offset: dict[int, str] = {}


class GoTime:
    """An instant (`unix_ns`) and the UTC offset in seconds (`offset`) Go wrote it in.

    Equality compares both fields, like the bytes on the wire do; ordering
    compares the instant only, so two spellings of one instant are neither
    less nor greater than each other, yet not equal. Immutable.

    A time parsed from Go's canonical text keeps that text: `format()`
    returns it as is, and `unix_ns` / `offset` are worked out from it on
    first use (the text was fully checked when it was parsed).
    """

    # `_v` is `(unix_ns, offset, text)`, text being `format()` once known;
    # or, until the instant is first needed, the canonical text `parse`
    # checked. One slot, so a reader in another thread sees all or nothing.
    __slots__ = ("_v",)
    __match_args__ = ("unix_ns", "offset")
    _v: Any

    def __init__(self, unix_ns: int, offset: int = 0) -> None:
        if type(unix_ns) is str:
            raise TypeError("unix_ns is an int of nanoseconds; GoTime.parse reads text")
        _set_v(self, (unix_ns, offset, None))

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple[type[GoTime], tuple[int, int]]:
        return type(self), (self.unix_ns, self.offset)

    @property
    def unix_ns(self) -> int:
        """Nanoseconds since 1970-01-01T00:00:00Z."""
        v = self._v
        if type(v) is str:
            v = self._resolve(v)
        return v[0]

    @property
    def offset(self) -> int:
        """Seconds east of UTC of the zone the time was written in."""
        v = self._v
        if type(v) is str:
            v = self._resolve(v)
        return v[1]

    def _resolve(self, text: str) -> tuple[int, int, str]:
        """Work out `unix_ns` and `offset` from the kept text (`parse` checked it)."""
        wall = _seconds_of_hour.get(text[:13])
        if wall is None:
            wall = _hour_of_canonical(text)
        v = _instant(text, wall)
        _set_v(self, v)
        return v

    @classmethod
    def parse(cls, text: str) -> GoTime:
        """Read Go's RFC3339 / RFC3339Nano text ('Z' or ±hh:mm, 0 to 9 fraction digits).

        Offsets are read in whole minutes, as the text holds them. Anything
        else raises `ValueError`, including years Go cannot write in RFC3339
        (outside 0000..9999) and values Go's parser rejects (month 13, Feb 30,
        second 60); offsets follow Go's own bounds (hours up to 24, minutes up
        to 60).
        """
        if cls is GoTime and type(text) is str and _canonical(text) is not None:
            time = _new(GoTime)
            _set_v(time, text)
            return time
        return cls._parse_any(text)

    @classmethod
    def _parse_any(cls, text: str) -> GoTime:
        match = _RFC3339.fullmatch(text)
        if match is None:
            raise ValueError(f"not an RFC 3339 time as Go writes it: {text!r}")
        date, hour_s, minute_s, second_s, fraction, zone = match.groups()
        days = _days_of_date.get(date)
        if days is None:
            days = _parse_date(date)
        hour, minute, second = _VALUE_OF[hour_s], _VALUE_OF[minute_s], _VALUE_OF[second_s]
        if hour > 23 or minute > 59 or second > 59:
            raise ValueError(f"time of day out of range: {text!r}")
        if zone is None:
            offset = 0
        else:
            cached = _offset_of_zone.get(zone)
            offset = _parse_zone(zone) if cached is None else cached
        wall = days * _DAY + hour * 3600 + minute * 60 + second
        nanos = int(fraction) * _FRACTION_SCALE[len(fraction)] if fraction else 0
        return cls((wall - offset) * _NS + nanos, offset)

    def format(self) -> str:
        """Go's `time.RFC3339Nano` text for this time, in its own offset.

        Trailing fraction zeros are trimmed, a zero fraction is left out, 'Z'
        stands for offset 0. Like Go, an offset with seconds (a zone's LMT)
        moves the wall clock by its full amount but prints only ±hh:mm, and a
        wall-clock year outside 0000..9999 raises `ValueError`.
        """
        v = self._v
        if type(v) is str:
            return v
        unix_ns, offset, text = v
        if text is not None:
            return text
        seconds, nanos = divmod(unix_ns, _NS)
        days, second_of_day = divmod(seconds + offset, _DAY)
        date = _date_of_days.get(days)
        if date is None:
            date = _format_date(days)
        hour, rest = divmod(second_of_day, 3600)
        minute, second = divmod(rest, 60)
        text = f"{date}T{_TWO_DIGITS[hour]}:{_TWO_DIGITS[minute]}:{_TWO_DIGITS[second]}"
        if nanos:
            text = f"{text}.{nanos:09d}".rstrip("0")
        zone = _zone_of_offset.get(offset)
        if zone is None:
            zone = _format_zone(offset)
        text += zone
        _set_v(self, (unix_ns, offset, text))
        return text

    @classmethod
    def from_datetime(cls, dt: datetime) -> GoTime:
        """The same instant, keeping `dt`'s UTC offset; a naive `dt` is ambiguous: `ValueError`."""
        utcoffset = dt.utcoffset()
        if utcoffset is None:
            raise ValueError("a naive datetime has no instant; give it a tzinfo")
        if utcoffset.microseconds:
            raise ValueError(f"UTC offset {utcoffset} is not a whole number of seconds")
        since = dt - _EPOCH
        unix_ns = (since.days * _DAY + since.seconds) * _NS + since.microseconds * 1000
        return cls(unix_ns, utcoffset.days * _DAY + utcoffset.seconds)

    @classmethod
    def from_unix_ns(cls, ns: int, offset: int = 0) -> GoTime:
        """`GoTime(ns, offset)`, named for readers who know Go's `time.Unix(0, ns)`."""
        return cls(ns, offset)

    @classmethod
    def now(cls) -> GoTime:
        """The current instant in UTC, to the nanosecond the clock gives."""
        return cls(time.time_ns())

    def to_datetime(self) -> datetime:
        """An aware `datetime` in this time's own offset, truncated to microseconds.

        `ValueError` when `datetime` cannot hold it (year 0, an offset of 24h).
        """
        try:
            return (_EPOCH + timedelta(microseconds=self.unix_ns // 1000)).astimezone(
                _zone(self.offset)
            )
        except OverflowError as exc:
            raise ValueError(f"{self!r} is outside the range of datetime") from exc

    def is_zero(self) -> bool:
        """Whether Go's `IsZero` holds: Go writes such a time as CBOR null."""
        v = self._v
        if type(v) is str:
            # Go's zero time is 0001-01-01T00:00:00Z: in any offset Go can
            # write, its wall clock is in year 0000 or 0001.
            if v >= "0002":
                return False
            v = self._resolve(v)
        return v[0] == _GO_ZERO_NS

    def __repr__(self) -> str:
        return f"GoTime(unix_ns={self.unix_ns!r}, offset={self.offset!r})"

    def __str__(self) -> str:
        return self.format()

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self.unix_ns == other.unix_ns and self.offset == other.offset

    def __ne__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self.unix_ns != other.unix_ns or self.offset != other.offset

    def __hash__(self) -> int:
        return hash((self.unix_ns, self.offset))

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, GoTime):
            return NotImplemented
        return self.unix_ns < other.unix_ns

    def __le__(self, other: object) -> bool:
        if not isinstance(other, GoTime):
            return NotImplemented
        return self.unix_ns <= other.unix_ns

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, GoTime):
            return NotImplemented
        return self.unix_ns > other.unix_ns

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, GoTime):
            return NotImplemented
        return self.unix_ns >= other.unix_ns


# `deadletter.codec` builds times with these too: `_new(GoTime)`, then
# `_set_v(time, text)` for text `_canonical` matched (Go's zero time aside).
_new = object.__new__
_set_v = GoTime.__dict__["_v"].__set__


def from_go_text(text: str) -> GoTime:
    """`GoTime.parse(text)` for a `str`, the codec's hot path: text Go wrote is kept as is."""
    if _canonical(text) is None:
        return GoTime._parse_any(text)
    time = _new(GoTime)
    _set_v(time, text)
    return time


def read_go_text(text: str) -> GoTime | None:
    """`GoTime.parse(text)` worked out at once, or None to say "use `parse`".

    For the codec's hot path, when the instant is about to be needed: text
    whose hour (`text[:13]`) an earlier canonical time already had only needs
    the rest checked, here with dictionary look-ups and string tests rather
    than a regular expression. Go's zero time and anything unusual give None.
    """
    wall = _seconds_of_hour.get(text[:13])
    if wall is None or text < "0002" or text[13:14] != ":":
        return None
    minute_second = _SECONDS_OF_MINUTE_SECOND.get(text[14:19])
    if minute_second is None:
        return None
    if text[-1] == "Z":
        offset = 0
        fraction = text[19:-1]
    else:
        zone_offset = _canonical_zone_offset(text[-6:])
        if zone_offset is None:
            return None
        offset = zone_offset
        fraction = text[19:-6]
    ns = (wall + minute_second - offset) * _NS
    if fraction:
        digits = fraction[1:]
        if (
            fraction[0] != "."
            or not 1 <= len(digits) <= 9
            or digits[-1] == "0"
            or not digits.isascii()
            or not digits.isdigit()
        ):
            return None
        ns += int(digits) * _FRACTION_SCALE[len(digits)]
    time = _new(GoTime)
    _set_v(time, (ns, offset, text))
    return time


_canonical_zones: dict[str, int | None] = {}


def _canonical_zone_offset(zone: str) -> int | None:
    """Seconds east of UTC for a zone as Go writes it (±hh:mm, hours to 24, never
    ±00:00, which Go writes as Z); None for anything else."""
    try:
        return _canonical_zones[zone]
    except KeyError:
        pass
    offset = None
    hours, minutes = _VALUE_OF.get(zone[1:3]), _VALUE_OF.get(zone[4:6])
    if (
        len(zone) == 6
        and zone[0] in "+-"
        and zone[3] == ":"
        and hours is not None
        and minutes is not None
        and hours <= 24
        and minutes <= 59
        and (hours or minutes)
    ):
        offset = hours * 3600 + minutes * 60
        if zone[0] == "-":
            offset = -offset
    _remember(_canonical_zones, zone, offset)
    return offset


def _instant(text: str, wall: int) -> tuple[int, int, str]:
    """`(unix_ns, offset, text)` of canonical `text`, `wall` being its hour's seconds."""
    wall += _SECONDS_OF_MINUTE_SECOND[text[14:19]]
    size = len(text)
    if text[-1] == "Z":
        offset = 0
        ns = wall * _NS
        if size != 20:
            ns += int(text[20:-1]) * _FRACTION_SCALE[size - 21]
    else:
        zone = text[-6:]
        offset = _offset_of_zone.get(zone)  # type: ignore[assignment]
        if offset is None:
            offset = _parse_zone(zone)
        ns = (wall - offset) * _NS
        if size != 25:
            ns += int(text[20:-6]) * _FRACTION_SCALE[size - 26]
    return ns, offset, text


def _hour_of_canonical(text: str) -> int:
    """Wall-clock seconds since the epoch at the start of the hour `text[:13]` names."""
    date = text[:10]
    days = _days_of_date.get(date)
    if days is None:
        days = _days_from_civil(int(text[:4]), _VALUE_OF[text[5:7]], _VALUE_OF[text[8:10]])
        _remember(_days_of_date, date, days)
    wall = days * _DAY + _VALUE_OF[text[11:13]] * 3600
    _remember(_seconds_of_hour, text[:13], wall)
    return wall


@lru_cache(maxsize=256)
def _zone(offset: int) -> timezone:
    return UTC if offset == 0 else timezone(timedelta(seconds=offset))


def _parse_date(date: str) -> int:
    year, month, day = int(date[:4]), _VALUE_OF[date[5:7]], _VALUE_OF[date[8:]]
    if (
        not 1 <= month <= 12
        or not 1 <= day <= _DAYS_IN_MONTH[month]
        or (month == 2 and day == 29 and not _is_leap(year))
    ):
        raise ValueError(f"no such date: {date!r}")
    days = _days_from_civil(year, month, day)
    _remember(_days_of_date, date, days)
    return days


def _format_date(days: int) -> str:
    year, month, day = _civil_from_days(days)
    if not 0 <= year <= 9999:
        raise ValueError(f"year {year} cannot be written in RFC 3339")
    date = f"{year:04d}-{_TWO_DIGITS[month]}-{_TWO_DIGITS[day]}"
    _remember(_date_of_days, days, date)
    return date


def _parse_zone(zone: str) -> int:
    """Seconds east of UTC for ±hh:mm, within Go's bounds (hours to 24, minutes to 60)."""
    hours, minutes = _VALUE_OF[zone[1:3]], _VALUE_OF[zone[4:]]
    if hours > 24 or minutes > 60:
        raise ValueError(f"UTC offset out of range: {zone!r}")
    offset = hours * 3600 + minutes * 60
    if zone[0] == "-":
        offset = -offset
    _remember(_offset_of_zone, zone, offset)
    return offset


def _format_zone(offset: int) -> str:
    """Go's 'Z' or ±hh:mm, minutes truncated toward zero: -00:00:30 prints as +00:00."""
    if offset == 0:
        return "Z"
    if offset <= -60:
        sign, minutes = "-", -offset // 60
    else:
        sign, minutes = "+", max(offset, 0) // 60
    zone = f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"
    _remember(_zone_of_offset, offset, zone)
    return zone


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> None:
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()
    cache[key] = value


def _is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 in the proleptic Gregorian calendar (year 0 included).

    Howard Hinnant's algorithm: `datetime` stops at year 1, Go does not.
    """
    if month <= 2:
        year -= 1
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146_097 + day_of_era - 719_468


def _civil_from_days(days: int) -> tuple[int, int, int]:
    days += 719_468
    era = days // 146_097
    day_of_era = days - era * 146_097
    year_of_era = (
        day_of_era - day_of_era // 1460 + day_of_era // 36_524 - day_of_era // 146_096
    ) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    shifted_month = (5 * day_of_year + 2) // 153
    day = day_of_year - (153 * shifted_month + 2) // 5 + 1
    month = shifted_month + 3 if shifted_month < 10 else shifted_month - 9
    year = year_of_era + era * 400 + (month <= 2)
    return year, month, day
