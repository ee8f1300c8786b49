"""Go's RFC3339Nano text and the instant it names, as numbers: no `GoTime` here.

`gotime` builds its `datetime`s on top of this. Here a time is nanoseconds
since the epoch and seconds east of UTC, in the proleptic Gregorian calendar
Go uses (year 0 included, which `datetime` lacks), and message times meet
plain `datetime`s only in the three exact conversions at the end. Times in
one queue share few dates and offsets, so their text is computed once.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

__all__ = [
    "FRACTION_SCALE",
    "SECONDS_OF_MINUTE_SECOND",
    "VALUE_OF",
    "canonical",
    "duration_ns",
    "epoch_ns",
    "format_text",
    "hour_of_canonical",
    "instant",
    "known_hour",
    "known_offset",
    "parse",
    "parse_zone",
    "utc_datetime",
]

NS = 1_000_000_000
DAY = 86_400
FRACTION_SCALE = tuple(10 ** (9 - digits) for digits in range(10))
_DAYS_IN_MONTH = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)

_RFC3339 = re.compile(
    r"(\d{4}-\d\d-\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(?:Z|([+-]\d\d:\d\d))",
    re.ASCII,
)
# Exactly the text `format_text` writes: a real calendar date (Feb 29 only in
# leap years), a time of day, a fraction without trailing zeros, 'Z' for
# offset 0 and ±hh:mm otherwise, within Go's offset bounds. Such text is kept
# as it came; anything else goes through `_RFC3339` and is checked there.
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
canonical = re.compile(
    _CANONICAL_DATE + r"T(?:[01]\d|2[0-3])" + _CANONICAL_TAIL, re.ASCII
).fullmatch
_TWO_DIGITS = tuple(f"{number:02d}" for number in range(100))
VALUE_OF = {text: number for number, text in enumerate(_TWO_DIGITS)}
SECONDS_OF_MINUTE_SECOND = {
    f"{minute:02d}:{second:02d}": minute * 60 + second
    for minute in range(60)
    for second in range(60)
}

_CACHE_LIMIT = 4096
_days_of_date: dict[str, int] = {}
_date_of_days: dict[int, str] = {}
_offset_of_zone: dict[str, int] = {}
_seconds_of_hour: dict[str, int] = {}
_zone_of_offset: dict[int, str] = {}

known_offset = _offset_of_zone.get
"""The offset of a ±hh:mm already read, or None: `parse_zone` reads it the first time."""
known_hour = _seconds_of_hour.get
"""The seconds of an hour `text[:13]` already read, or None: see `hour_of_canonical`."""


def parse(text: str) -> tuple[int, int]:
    """`(unix_ns, offset)` of any RFC 3339 text Go's parser reads, or `ValueError`."""
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise ValueError(f"not an RFC 3339 time as Go writes it: {text!r}")
    date, hour_s, minute_s, second_s, fraction, zone = match.groups()
    days = _days_of_date.get(date)
    if days is None:
        days = _parse_date(date)
    hour, minute, second = VALUE_OF[hour_s], VALUE_OF[minute_s], VALUE_OF[second_s]
    if hour > 23 or minute > 59 or second > 59:
        raise ValueError(f"time of day out of range: {text!r}")
    if zone is None:
        offset = 0
    else:
        cached = _offset_of_zone.get(zone)
        offset = parse_zone(zone) if cached is None else cached
    wall = days * DAY + hour * 3600 + minute * 60 + second
    nanos = int(fraction) * FRACTION_SCALE[len(fraction)] if fraction else 0
    return (wall - offset) * NS + nanos, offset


def format_text(unix_ns: int, offset: int) -> str:
    """Go's RFC3339Nano text of the instant in the zone `offset` seconds east of UTC.

    Trailing fraction zeros trimmed, no fraction when it is zero, 'Z' for
    offset 0; `ValueError` for a year outside 0000..9999.
    """
    seconds, nanos = divmod(unix_ns, NS)
    days, second_of_day = divmod(seconds + offset, DAY)
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


def instant(text: str) -> tuple[int, int]:
    """`(unix_ns, offset)` of text `canonical` matched."""
    wall = _seconds_of_hour.get(text[:13])
    if wall is None:
        wall = hour_of_canonical(text)
    wall += SECONDS_OF_MINUTE_SECOND[text[14:19]]
    size = len(text)
    if text[-1] == "Z":
        offset = 0
        ns = wall * NS
        if size != 20:
            ns += int(text[20:-1]) * FRACTION_SCALE[size - 21]
    else:
        zone = text[-6:]
        offset = _offset_of_zone.get(zone)  # type: ignore[assignment]
        if offset is None:
            offset = parse_zone(zone)
        ns = (wall - offset) * NS
        if size != 25:
            ns += int(text[20:-6]) * FRACTION_SCALE[size - 26]
    return ns, offset


def hour_of_canonical(text: str) -> int:
    """Wall-clock seconds since the epoch at the start of the hour `text[:13]` names."""
    date = text[:10]
    days = _days_of_date.get(date)
    if days is None:
        days = _days_from_civil(int(text[:4]), VALUE_OF[text[5:7]], VALUE_OF[text[8:10]])
        _remember(_days_of_date, date, days)
    wall = days * DAY + VALUE_OF[text[11:13]] * 3600
    _remember(_seconds_of_hour, text[:13], wall)
    return wall


def parse_zone(zone: str) -> int:
    """Seconds east of UTC for ±hh:mm, within Go's bounds (hours to 24, minutes to 60)."""
    hours, minutes = VALUE_OF[zone[1:3]], VALUE_OF[zone[4:]]
    if hours > 24 or minutes > 60:
        raise ValueError(f"UTC offset out of range: {zone!r}")
    offset = hours * 3600 + minutes * 60
    if zone[0] == "-":
        offset = -offset
    _remember(_offset_of_zone, zone, offset)
    return offset


def _parse_date(date: str) -> int:
    year, month, day = int(date[:4]), VALUE_OF[date[5:7]], VALUE_OF[date[8:]]
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


class _Instant(Protocol):
    @property
    def unix_ns(self) -> int: ...


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EARLIEST_US = (datetime.min.replace(tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1)
_LATEST_US = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1)


def epoch_ns(moment: datetime | _Instant) -> int:
    """Nanoseconds since the Unix epoch of a message time (GoTime, GoOnlyTime or an
    aware datetime), exact: no float on the way."""
    unix_ns = getattr(moment, "unix_ns", None)
    if isinstance(unix_ns, int):
        return unix_ns
    assert isinstance(moment, datetime)
    return duration_ns(moment - _EPOCH)


def duration_ns(delta: timedelta) -> int:
    """A timedelta in nanoseconds, exact."""
    return (delta.days * DAY + delta.seconds) * NS + delta.microseconds * 1000


def utc_datetime(unix_ns: int) -> datetime:
    """The aware UTC datetime of nanoseconds since the epoch, to the microsecond,
    held to datetime's years 1 to 9999 (Go can write a year 0 or 10000)."""
    micro = min(max(unix_ns // 1000, _EARLIEST_US), _LATEST_US)
    return _EPOCH + timedelta(microseconds=micro)
