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
from dataclasses import dataclass
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
_TWO_DIGITS = tuple(f"{number:02d}" for number in range(100))
_VALUE_OF = {text: number for number, text in enumerate(_TWO_DIGITS)}

# Times in one queue share few dates and offsets: their text is computed once.
_CACHE_LIMIT = 4096
_days_of_date: dict[str, int] = {}
_date_of_days: dict[int, str] = {}
_offset_of_zone: dict[str, int] = {}
_zone_of_offset: dict[int, str] = {}


@dataclass(frozen=True, slots=True)
class GoTime:
    """An instant (`unix_ns`) and the UTC offset in seconds (`offset`) Go wrote it in.

    Equality compares both fields, like the bytes on the wire do; ordering
    compares the instant only, so two spellings of one instant are neither
    less nor greater than each other, yet not equal.
    """

    unix_ns: int
    offset: int = 0

    @classmethod
    def parse(cls, text: str) -> GoTime:
        """Read Go's RFC3339 / RFC3339Nano text ('Z' or ±hh:mm, 0 to 9 fraction digits).

        Offsets are read in whole minutes, as the text holds them. Anything
        else raises `ValueError`, including years Go cannot write in RFC3339
        (outside 0000..9999) and values Go's parser rejects (month 13, Feb 30,
        second 60); offsets follow Go's own bounds (hours up to 24, minutes up
        to 60).
        """
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
        offset = self.offset
        seconds, nanos = divmod(self.unix_ns, _NS)
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
        return text + zone

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
        return self.unix_ns == _GO_ZERO_NS

    def __str__(self) -> str:
        return self.format()

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
