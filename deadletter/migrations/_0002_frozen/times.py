# Frozen for migration 0002: how it wrote a message's times. Never edit.
"""A message time as the text Go writes, from whatever the codec of the time read as one.

Go's canonical RFC3339Nano text is kept as it came; other RFC 3339 text, and
epochs, are written in Go's canonical form (trailing fraction zeros trimmed,
no fraction when zero, 'Z' for offset 0, the wall clock of the time's own
zone); Go's zero time is None (CBOR null). In the proleptic Gregorian
calendar, year 0 included, as Go has it.
"""

from __future__ import annotations

import re

__all__ = ["epoch_text", "go_text", "stamp_text"]

_NS = 1_000_000_000
_DAY = 86_400
_GO_ZERO_NS = -62_135_596_800 * _NS  # 0001-01-01T00:00:00Z
_MIN_EPOCH_NS = -62_167_219_200 * _NS  # 0000-01-01T00:00:00Z
_MAX_EPOCH_NS = 253_402_300_799 * _NS + 999_999_999  # 9999-12-31T23:59:59.999999999Z
_DAYS_IN_MONTH = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_RFC3339 = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(?:Z|([+-])(\d\d):(\d\d))",
    re.ASCII,
)
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


def go_text(text: str) -> str | None:
    """The text Go writes for time `text` (None for the zero time); `ValueError` if it is
    not RFC 3339 text Go's parser reads."""
    if _canonical(text) is not None:
        if text < "0002" and _parse(text)[0] == _GO_ZERO_NS:
            return None
        return text
    unix_ns, offset = _parse(text)
    return None if unix_ns == _GO_ZERO_NS else _format(unix_ns, offset)


def epoch_text(unix_ns: int) -> str | None:
    """The text of an epoch read as nanoseconds (UTC); `ValueError` outside years 0000..9999."""
    if not _MIN_EPOCH_NS <= unix_ns <= _MAX_EPOCH_NS:
        raise ValueError("outside years 0000..9999")
    return None if unix_ns == _GO_ZERO_NS else _format(unix_ns, 0)


def stamp_text(unix_ns: int) -> str:
    """The text of the instant a message without `QueuedAt` is stamped with, in UTC."""
    return _format(unix_ns, 0)


def _parse(text: str) -> tuple[int, int]:
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise ValueError(f"not an RFC 3339 time as Go writes it: {text!r}")
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    fraction, sign, zone_hours, zone_minutes = match.groups()[6:]
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    if (
        not 1 <= month <= 12
        or not 1 <= day <= _DAYS_IN_MONTH[month]
        or (month == 2 and day == 29 and not leap)
    ):
        raise ValueError(f"no such date: {text[:10]!r}")
    if hour > 23 or minute > 59 or second > 59:
        raise ValueError(f"time of day out of range: {text!r}")
    offset = 0
    if sign is not None:
        if int(zone_hours) > 24 or int(zone_minutes) > 60:
            raise ValueError(f"UTC offset out of range: {text[-6:]!r}")
        offset = int(zone_hours) * 3600 + int(zone_minutes) * 60
        offset = -offset if sign == "-" else offset
    wall = _days_from_civil(year, month, day) * _DAY + hour * 3600 + minute * 60 + second
    nanos = int(fraction.ljust(9, "0")) if fraction else 0
    return (wall - offset) * _NS + nanos, offset


def _format(unix_ns: int, offset: int) -> str:
    seconds, nanos = divmod(unix_ns, _NS)
    days, second_of_day = divmod(seconds + offset, _DAY)
    year, month, day = _civil_from_days(days)
    if not 0 <= year <= 9999:
        raise ValueError(f"year {year} cannot be written in RFC 3339")
    hour, rest = divmod(second_of_day, 3600)
    minute, second = divmod(rest, 60)
    text = f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}"
    if nanos:
        text = f"{text}.{nanos:09d}".rstrip("0")
    if offset == 0:
        return text + "Z"
    if offset <= -60:
        sign, minutes = "-", -offset // 60
    else:
        sign, minutes = "+", max(offset, 0) // 60
    return f"{text}{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 (Howard Hinnant's algorithm)."""
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
    return year_of_era + era * 400 + (month <= 2), month, day
