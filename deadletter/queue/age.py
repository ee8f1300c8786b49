"""The age rule, in one place: a message whose `queued_at` (its first failure) is
older than its queue's age limit (its policy's `max_age`, else
`DEADLETTER_MAX_QUEUE_AGE`: `limits.max_age`) is expired; a message without one is not
(it is stamped with now when read, and the limit runs from then).

A first failure cannot lie ahead: one later than now by more than
`MAX_CLOCK_SKEW` would hold the message past the age limit (one in the year
9999 for ever), so every way in refuses it (`first_failure_error`).

Pure and small, below `legacy` and `queue`, which both apply it.
"""

from __future__ import annotations

import time
from datetime import timedelta

from deadletter.conf import conf
from deadletter.queue import limits
from deadletter.wire.gotime import GoOnlyTime, GoTime, duration_ns

__all__ = [
    "MAX_CLOCK_SKEW",
    "cutoff_ns",
    "expired",
    "first_failure_error",
    "is_future",
    "max_age_ns",
]

# How far ahead of this clock a first failure may be: another machine's clock
# (the Go program's, an API client's) may run a little fast.
MAX_CLOCK_SKEW = timedelta(minutes=5)
MAX_CLOCK_SKEW_NS = int(MAX_CLOCK_SKEW.total_seconds()) * 1_000_000_000


def max_age_ns(queue: str | None = None) -> int:
    """`queue`'s age limit in nanoseconds (`DEADLETTER_MAX_QUEUE_AGE` when None):
    read once per scan or page, never per row."""
    return duration_ns(conf.MAX_QUEUE_AGE if queue is None else limits.max_age(queue))


def cutoff_ns(
    now_ns: int | None = None, max_age: int | None = None, *, queue: str | None = None
) -> int:
    """The instant (ns since the epoch) before which a first failure has expired:
    `max_age` ns before `now_ns`, or `queue`'s age limit before it."""
    return (time.time_ns() if now_ns is None else now_ns) - (
        max_age_ns(queue) if max_age is None else max_age
    )


def expired(queued_at: GoTime | GoOnlyTime | None, cutoff: int) -> bool:
    """Whether a message first failed at `queued_at` has expired at `cutoff`."""
    return queued_at is not None and queued_at.unix_ns < cutoff


def is_future(moment: GoTime | GoOnlyTime, now_ns: int | None = None) -> bool:
    """Whether `moment` is later than now by more than `MAX_CLOCK_SKEW`."""
    return moment.unix_ns > (time.time_ns() if now_ns is None else now_ns) + MAX_CLOCK_SKEW_NS


def first_failure_error(
    queued_at: GoTime | GoOnlyTime | None, now_ns: int | None = None
) -> str | None:
    """Why `queued_at` cannot be a first failure (it is in the future, beyond
    `MAX_CLOCK_SKEW`, so the age limit would not reach it), or None when it can;
    an unset one passes (it is stamped with now). Each way in raises its own error."""
    if queued_at is None or not is_future(queued_at, now_ns):
        return None
    return (
        f"queued_at {queued_at.format()} is in the future: a first failure may be at "
        f"most {MAX_CLOCK_SKEW.seconds // 60} minutes ahead of this server's clock"
    )
