"""A queue's own limits: how long its archive keeps what left it (`archive_for`),
its age limit (`max_age`) and whether operators may edit its messages
(`editable`), read from its `DEADLETTER_HANDLERS` dict, else the global settings.

The one reading of those keys, for the queue's rules, the drain, the admin and
the checks (which report a bad value through `value_problem`). Pure: settings in,
values out, no database.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from deadletter.conf import conf

__all__ = [
    "ARCHIVE_OFF",
    "MAX_AGE_LIMIT",
    "archive_for",
    "archive_for_problem",
    "editable",
    "editable_problem",
    "max_age",
    "max_age_problem",
]

ARCHIVE_OFF = timedelta(0)
"""An `archive_for` of zero keeps nothing: what leaves a queue is gone, as before the archive."""

MAX_AGE_LIMIT = timedelta(microseconds=(2**63 - 1) // 1000)
"""The longest age limit: the age rule counts in 64-bit nanoseconds, as Go's time.Duration."""


def _policy(queue: str) -> Mapping[str, Any]:
    value = conf.HANDLERS.get(queue) if isinstance(conf.HANDLERS, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def archive_for(queue: str) -> timedelta | None:
    """How long the archive keeps an entry of `queue`: None for ever, `ARCHIVE_OFF`
    for not at all (the queue's `archive_for`, else `DEADLETTER_ARCHIVE_FOR`)."""
    return _policy(queue).get("archive_for", conf.ARCHIVE_FOR)


def max_age(queue: str) -> timedelta:
    """`queue`'s age limit: its `max_age`, else `DEADLETTER_MAX_QUEUE_AGE`."""
    return _policy(queue).get("max_age", conf.MAX_QUEUE_AGE)


def editable(queue: str) -> bool:
    """Whether operators may edit `queue`'s messages (its `editable`; off by default)."""
    return _policy(queue).get("editable", False) is True


def archive_for_problem(value: Any, where: str) -> str | None:
    """What is wrong with an archive retention (a timedelta of at least 0, or None), or None."""
    if value is None or (isinstance(value, timedelta) and value >= ARCHIVE_OFF):
        return None
    return (
        f"{where} must be None (keep for ever) or a timedelta of at least 0 "
        f"(timedelta(0) turns the archive off), got {value!r}"
    )


def max_age_problem(value: Any, where: str) -> str | None:
    """What is wrong with an age limit (a positive timedelta within `MAX_AGE_LIMIT`), or None."""
    if isinstance(value, timedelta) and ARCHIVE_OFF < value <= MAX_AGE_LIMIT:
        return None
    return (
        f"{where} must be a positive timedelta of at most {MAX_AGE_LIMIT.days:,} days "
        f"(2**63 - 1 nanoseconds: the age rule counts in 64-bit nanoseconds), got {value!r}"
    )


def editable_problem(value: Any, where: str) -> str | None:
    """What is wrong with an `editable` flag (True or False), or None."""
    if isinstance(value, bool):
        return None
    return f"{where} must be True or False, got {value!r}"
