"""The age rule, in one place: a message whose `queued_at` (its first failure) is
older than `DEADLETTER_MAX_QUEUE_AGE` is expired; a message without one is not
(it is stamped with now when read, and the limit runs from then).

Pure and small, below `legacy` and `queue`, which both apply it.
"""

from __future__ import annotations

import time

from deadletter.conf import conf
from deadletter.gotime import GoOnlyTime, GoTime

__all__ = ["cutoff_ns", "expired", "max_age_ns"]


def max_age_ns() -> int:
    """`DEADLETTER_MAX_QUEUE_AGE` in nanoseconds."""
    age = conf.MAX_QUEUE_AGE
    return (age.days * 86_400 + age.seconds) * 1_000_000_000 + age.microseconds * 1_000


def cutoff_ns(now_ns: int | None = None, max_age: int | None = None) -> int:
    """The instant (ns since the epoch) before which a first failure has expired."""
    return (time.time_ns() if now_ns is None else now_ns) - (
        max_age_ns() if max_age is None else max_age
    )


def expired(queued_at: GoTime | GoOnlyTime | None, cutoff: int) -> bool:
    """Whether a message first failed at `queued_at` has expired at `cutoff`."""
    return queued_at is not None and queued_at.unix_ns < cutoff
