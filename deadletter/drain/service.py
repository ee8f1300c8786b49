"""The drain as a long-lived service (`deadletter_drain --forever`): pass after
pass, each from a fresh snapshot of the queues' tails, so what is parked while
it runs is handed over by the next pass; a stop (SIGTERM, SIGINT) ends it after
the message in hand, between passes at once.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from deadletter.drain.outcomes import DrainReport
from deadletter.drain.run import Drainer

__all__ = ["DEFAULT_INTERVAL", "ServiceReport", "serve"]

logger = logging.getLogger("deadletter")

DEFAULT_INTERVAL = 60.0


@dataclasses.dataclass
class ServiceReport:
    """What a service run did over all its passes; `last` is its last pass."""

    passes: int = 0
    delivered: int = 0
    failed: int = 0
    errors: int = 0
    last: DrainReport | None = None
    stopped_by: str | None = None


def serve(
    drainer: Drainer,
    *,
    interval: float = DEFAULT_INTERVAL,
    passes: int | None = None,
    on_pass: Callable[[DrainReport], None] | None = None,
) -> ServiceReport:
    """Run `drainer` pass after pass, `interval` seconds from one pass's end to the
    next one's start, until it is stopped (or after `passes`, for tests and
    one-off loops). Each pass logs one line; `on_pass` hears of each report."""
    total = ServiceReport()
    while not drainer.stopping():
        report = drainer.run()
        total.passes += 1
        total.delivered += report.delivered
        total.failed += report.failed
        total.errors += report.errors
        total.last = report
        logger.info(
            "drain pass=%s delivered=%s failed=%s waiting=%s paused=%s elapsed=%.3f",
            total.passes,
            report.delivered,
            report.failed,
            report.waiting,
            ",".join(report.paused) or "-",
            report.elapsed,
        )
        if on_pass is not None:
            on_pass(report)
        if passes is not None and total.passes >= passes:
            break
        drainer.pause_between_passes(interval)
    total.stopped_by = drainer.stopped_by
    return total
