"""The message a failed delivery parks: a mirror of the Go program's `msgtypes.Message`."""

from __future__ import annotations

import dataclasses
import enum
from datetime import datetime
from typing import Any

from deadletter.wire.gotime import GoOnlyTime, GoTime

__all__ = ["GO_EVENT_CODES", "EventCode", "Message"]


class EventCode(enum.IntEnum):
    GRADE = 0
    EXAM = 1
    READING = 2
    FINAL_GRADE = 3
    NATIONAL_EXAM = 4


# The Go program's names of its codes, for `DEADLETTER_EVENT_CODES`: a project
# whose messages come from that program opts into them; any other sees numbers.
GO_EVENT_CODES: dict[int, str] = {int(code): code.name for code in EventCode}


def _as_gotime(value: datetime | GoOnlyTime | None) -> GoTime | GoOnlyTime | None:
    if value is None or type(value) is GoTime or type(value) is GoOnlyTime:
        return value
    if isinstance(value, datetime):
        return GoTime.from_datetime(value)
    raise TypeError(f"expected an aware datetime or None, got {type(value).__name__}")


@dataclasses.dataclass(eq=True)
class Message:
    """One failed message.

    Times are aware `datetime`s: `GoTime`s, which also keep the nanoseconds
    and the text Go wrote, so a round trip writes Go's bytes back (a plain
    aware `datetime` given here is converted; a naive one is a `ValueError`).
    A time `datetime` cannot hold (year 0, a ±24:00 offset) is a `GoOnlyTime`.
    `None` stands for Go's zero time and for a nil list; an empty list stays an empty list, because
    Go tells them apart on the wire. `extra` holds map keys this app does not
    know, in their original order, so they are written back unchanged.
    `raw_entries` holds, as their own CBOR bytes, the map entries Go skips and
    `extra` cannot hold (an integer key, an unknown key's value with text that
    is not UTF-8): written back unchanged after `extra`.
    """

    timestamp: GoTime | GoOnlyTime | None = None
    queued_at: GoTime | GoOnlyTime | None = None
    username: str = ""
    subject: str = ""
    descriptions: list[str] | None = None
    fields: list[str] | None = None
    skip_recipients: list[str] | None = None
    code: int = EventCode.GRADE
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    raw_entries: tuple[bytes, ...] = ()

    def __post_init__(self) -> None:
        if self.timestamp is not None and type(self.timestamp) is not GoTime:
            self.timestamp = _as_gotime(self.timestamp)
        if self.queued_at is not None and type(self.queued_at) is not GoTime:
            self.queued_at = _as_gotime(self.queued_at)
        code = self.code
        # Go's EventCode is a plain int: unknown codes ride along as they are.
        if type(code) is int:
            self.code = _EVENT_CODES.get(code, code)
        elif isinstance(code, int) and not isinstance(code, EventCode):
            self.code = _EVENT_CODES.get(int(code), code)

    def replace(self, **changes: Any) -> Message:
        """A copy with `changes` applied; lists and `extra` are copied, never shared."""
        values: dict[str, Any] = {
            "timestamp": self.timestamp,
            "queued_at": self.queued_at,
            "username": self.username,
            "subject": self.subject,
            "descriptions": _copy_list(self.descriptions),
            "fields": _copy_list(self.fields),
            "skip_recipients": _copy_list(self.skip_recipients),
            "code": self.code,
            "extra": dict(self.extra),
            "raw_entries": self.raw_entries,
        }
        if changes:
            values.update(changes)
        if type(self) is Message:
            return Message(**values)
        return dataclasses.replace(self, **values)


_EVENT_CODES: dict[int, EventCode] = {code.value: code for code in EventCode}


def _copy_list(value: list[str] | None) -> list[str] | None:
    return None if value is None else list(value)
