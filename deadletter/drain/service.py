"""The drain as a long-lived service (`deadletter_drain --forever`): pass after
pass, each from a fresh snapshot of the queues' tails, so what is parked while
it runs is handed over by the next pass; a stop (SIGTERM, SIGINT) ends it after
the message in hand, between passes at once.

Each pass begins on a working connection (`Drainer.reconnect`), so a server
restart, a failover or a killed session costs at most the pass it cut short. A
database that cannot be reached for `DEADLETTER_DATABASE_OUTAGE_LIMIT` ends the
service with `ServiceReport.failure` saying why, for the command to exit
non-zero on and its supervisor to restart it.

Between two passes the service runs stored redrives (`redrive_turns.redrive_turn`):
planned ones, and running ones whose runner is gone, for the time the interval
leaves (at least `REDRIVE_TURN` seconds), then hands the one in progress back as
planned and makes its next pass. So a long redrive never holds the queues' own
drain back by more than a turn, and another service may carry it on. Then the
archive's retention (`archive_retention.purge`) gets up to `PURGE_TURN` seconds.
After each pass `signals.drain_pass_finished` is sent, on which the alert rules
are evaluated (`reports.alerts`, connected by the app: the drain does not import
reports).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db import DatabaseError

from deadletter import signals
from deadletter.conf import conf
from deadletter.drain.errors import DrainConfigError
from deadletter.drain.redrive_turns import redrive_turn
from deadletter.drain.report import DrainReport
from deadletter.drain.run import Drainer
from deadletter.drain.timeouts import seconds_of
from deadletter.queue import search
from deadletter.queue.archive_retention import purge
from deadletter.store import reconnect, sql

__all__ = [
    "DEFAULT_INTERVAL",
    "PURGE_TURN",
    "RECONNECT_PAUSE",
    "REDRIVE_TURN",
    "ServiceReport",
    "configured_outage_limit",
    "outage_limit_problem",
    "serve",
]

logger = logging.getLogger("deadletter")

DEFAULT_INTERVAL = 60.0
RECONNECT_PAUSE = 1.0
"""The least wait between two tries to reach a database that is down (`--interval 0`
must not spin on it)."""

REDRIVE_TURN = 5.0
"""The least time a turn of redrives gets between two passes (`--interval 0` too)."""

PURGE_TURN = 2.0
"""The most time the archive's retention gets between two passes: a backlog of
expired entries goes over several, never holding the next pass back long."""

UNREACHABLE = "database unreachable"
"""`ServiceReport.stopped_by` when the outage limit ended the service."""


@dataclasses.dataclass
class ServiceReport:
    """What a service run did over all its passes; `last` is its last pass.
    `failure` is one line saying why the service gave up, when it did."""

    passes: int = 0
    delivered: int = 0
    failed: int = 0
    errors: int = 0
    redrives: int = 0
    last: DrainReport | None = None
    stopped_by: str | None = None
    failure: str | None = None


def outage_limit_problem(value: Any) -> str | None:
    """What is wrong with `DEADLETTER_DATABASE_OUTAGE_LIMIT` (E019), or None; the
    service refuses to start on the same text."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else seconds_of(value)
    if seconds is None or seconds <= 0:
        return (
            "DEADLETTER_DATABASE_OUTAGE_LIMIT must be a timedelta or a number of seconds "
            f"above 0, got {value!r}"
        )
    return None


def configured_outage_limit() -> float:
    """`DEADLETTER_DATABASE_OUTAGE_LIMIT` in seconds, or `DrainConfigError` with check
    E019's text."""
    problem = outage_limit_problem(conf.raw("DATABASE_OUTAGE_LIMIT"))
    if problem is not None:
        raise DrainConfigError(problem)
    return conf.DATABASE_OUTAGE_LIMIT


def serve(
    drainer: Drainer,
    *,
    interval: float = DEFAULT_INTERVAL,
    passes: int | None = None,
    on_pass: Callable[[DrainReport], None] | None = None,
) -> ServiceReport:
    """Run `drainer` pass after pass, `interval` seconds from one pass's end to the
    next one's start, until it is stopped (or after `passes`, for tests and
    one-off loops). Each pass logs one line; `on_pass` hears of each report.

    Before each pass the queue's database is reached afresh; while it cannot be,
    no pass runs and it is tried again (at least `RECONNECT_PAUSE` apart), until
    the outage limit, which ends the service with `failure` set."""
    limit = configured_outage_limit()
    total = ServiceReport()
    down_since: float | None = None
    sweep_at: search.SweepCursor = None
    while not drainer.stopping():
        try:
            drainer.reconnect()
        except DatabaseError as exc:
            now = time.monotonic()
            down_since = now if down_since is None else down_since
            down_for = now - down_since
            if down_for >= limit:
                total.failure = _gave_up(exc, down_for, limit)
                logger.error("drain service gave up: %s", total.failure)
                drainer.stop(UNREACHABLE)
                break
            logger.error(
                "drain cannot reach the database database=%s down_for=%.1f limit=%g error=%s",
                conf.DATABASE,
                down_for,
                limit,
                reconnect.first_line(exc),
            )
            drainer.pause_between_passes(min(max(interval, RECONNECT_PAUSE), limit - down_for))
            continue
        if down_since is not None:
            logger.warning(
                "drain reached the database again database=%s down_for=%.1f",
                conf.DATABASE,
                time.monotonic() - down_since,
            )
            down_since = None
        report = drainer.run()
        total.passes += 1
        total.delivered += report.delivered
        total.failed += report.failed
        total.errors += report.errors
        total.last = report
        logger.info(
            "drain pass=%s delivered=%s failed=%s held=%s waiting=%s paused=%s elapsed=%.3f",
            total.passes,
            report.delivered,
            report.failed,
            report.held,
            report.waiting,
            ",".join(report.paused) or "-",
            report.elapsed,
        )
        if on_pass is not None:
            on_pass(report)
        _pass_finished(report)
        turn_began = time.monotonic()
        total.redrives += _redrives(drainer, max(interval, REDRIVE_TURN))
        sweep_at = _search_upkeep(sweep_at)
        _purge_archive()
        if passes is not None and total.passes >= passes:
            break
        drainer.pause_between_passes(max(0.0, interval - (time.monotonic() - turn_began)))
    total.stopped_by = drainer.stopped_by
    return total


def _pass_finished(report: DrainReport) -> None:
    """`drain_pass_finished` to its receivers (the alert rules' evaluation); one that
    raises is logged, and the service goes on to its next pass."""
    for receiver, result in signals.drain_pass_finished.send_robust("deadletter", report=report):
        if isinstance(result, Exception):
            logger.error(
                "drain_pass_finished receiver %r failed: %s",
                receiver,
                reconnect.first_line(result),
                exc_info=result,
            )
            reconnect.close_if_lost(sql.connection())


def _redrives(drainer: Drainer, seconds: float) -> int:
    """A turn of stored redrives of the queues this service drains (and moves of
    any queue), ended early by the service's stop; how many ran."""
    try:
        return redrive_turn(queues=drainer.queues, seconds=seconds, halted=drainer.stopping)
    except DatabaseError:
        logger.exception("drain service could not run its redrives")
        reconnect.close_if_lost(sql.connection())
        return 0


def _search_upkeep(sweep_at: search.SweepCursor) -> search.SweepCursor:
    """The search index kept in step between passes (`search.upkeep`): what was
    parked since is indexed, the postings of delivered rows swept a batch a time."""
    try:
        indexed, removed, sweep_at = search.upkeep(sweep_after=sweep_at)
    except DatabaseError:
        logger.exception("drain service could not keep the search index in step")
        reconnect.close_if_lost(sql.connection())
        return None
    if indexed or removed:
        logger.info("search index rows_indexed=%s postings_swept=%s", indexed, removed)
    return sweep_at


def _purge_archive() -> None:
    """The archive's entries past their queue's `archive_for`, for `PURGE_TURN` seconds."""
    try:
        purge(deadline=time.monotonic() + PURGE_TURN)
    except DatabaseError:
        logger.exception("drain service could not purge the archive")
        reconnect.close_if_lost(sql.connection())


def _gave_up(exc: DatabaseError, down_for: float, limit: float) -> str:
    where = reconnect.where(sql.connection())
    return (
        f"cannot reach {where} for {down_for:.0f} s "
        f"(DEADLETTER_DATABASE_OUTAGE_LIMIT is {limit:g} s): {reconnect.first_line(exc)}"
    )
