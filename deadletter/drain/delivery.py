"""The one delivery loop: every path that hands parked messages to their handlers
(a drain pass, its worker processes, `--forever`, and `redeliver`, the admin's
and the API's "retry these") runs `Delivery.hand_over`, so the claim, the time
limit, the hung-handler stop, the breaker and the report are one piece of code.

A source is a `Take`: a callable giving the next message, `SKIPPED` (nothing
this turn: a chosen row that is gone or that another drain holds) or None (no
more). On a database that claims rows (PostgreSQL, MySQL/MariaDB) each call runs
inside the transaction that settles the message it gives, so the row stays
locked `FOR UPDATE SKIP LOCKED` while its handler runs and a drain that dies
releases it. SQLite has no row locks: a source there reads with no transaction
open (the queue's lock file keeps other drains out) and each outcome is its own
short write.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping

from deadletter import queue
from deadletter.drain.handlers import Loaded
from deadletter.drain.outcomes import deliver
from deadletter.drain.report import DrainReport, Outcome
from deadletter.drain.timeouts import HungHandlers, TimeLimit
from deadletter.drain.workers import Budget, Guard
from deadletter.queue import claims as queue_claims
from deadletter.queue import rows
from deadletter.queue.claims import ClaimTransactions
from deadletter.wire import keys

__all__ = ["SKIPPED", "Delivery", "Pace", "Skip", "Stop", "Take"]

logger = logging.getLogger("deadletter")


class Skip(enum.Enum):
    SKIPPED = "skipped"


SKIPPED = Skip.SKIPPED
"""What a source gives when it has nothing this turn but may have more."""

Take = Callable[[], "queue.Queued | Skip | None"]


class Stop(threading.Event):
    """Why a run ends before its sources do, set once: by a signal handler, another
    thread, or the loop itself (a spent time budget, hung handlers, a lost parent)."""

    def __init__(self) -> None:
        super().__init__()
        self.reason: str | None = None

    def __call__(self, reason: str = "stop") -> None:
        if not self.is_set():
            self.reason = reason
            self.set()


class Pace:
    """Deliveries held to `rate` a second, split among `workers` processes; a
    stop ends the wait."""

    def __init__(self, rate: float, workers: int, stop: Stop) -> None:
        self._gap = workers / rate
        self._stop = stop
        self._next_at = 0.0

    def __call__(self) -> None:
        now = time.monotonic()
        if self._next_at > now:
            self._stop.wait(self._next_at - now)
            now = time.monotonic()
        self._next_at = max(self._next_at, now) + self._gap


@dataclasses.dataclass(kw_only=True, eq=False)
class Delivery:
    """One run's hand-over of messages: `handlers` by queue, the run's `report`,
    its `stop`, the handlers' time `limit`, the `--limit` `budget` and the `pace`.

    `on_outcome` hears of each message handed over (its key and outcome),
    `on_drop` of each message the queue's rules dropped on the way (expired,
    corrupt). With `breakers` a queue's breaker (`policy`) stops its source for
    the rest of the run after that many failed attempts in a row; `orphaned`
    stops a worker process whose parent is gone. On a server the queue's
    connection stays out of autocommit between two messages of a source (see
    `ClaimTransactions`; `on_outcome` runs there), unless `autocommit_between`.
    """

    handlers: Mapping[str, Loaded]
    report: DrainReport
    stop: Stop
    limit: TimeLimit
    budget: Budget = dataclasses.field(default_factory=lambda: Budget(None, Guard()))
    pace: Pace | None = None
    on_outcome: Callable[[bytes, Outcome], None] | None = None
    on_drop: Callable[[Outcome], None] | None = None
    breakers: bool = True
    orphaned: Callable[[], bool] | None = None
    autocommit_between: bool = False
    claims: bool = dataclasses.field(init=False)
    _failures_in_row: dict[str, int] = dataclasses.field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.claims = queue_claims.can_claim_rows()

    def hand_over(self, take: Take, name: str | None = None) -> queue.Queued | None:
        """Hand over what `take` gives, each message to its queue's handler, until it
        gives None, the run stops, or the breaker pauses queue `name`. Returns the
        message it took and then did not hand over (a stop came between), if any.
        A database error passes through, the message in hand left as it was."""
        claimed = self.claims
        transactions = ClaimTransactions(autocommit_between=self.autocommit_between)
        no_transaction = contextlib.nullcontext()
        with transactions if claimed else no_transaction:
            while self.go_on(name):
                if not self.budget.take():
                    return None
                if self.pace is not None:
                    self.pace()
                if self.stop.is_set():
                    self.budget.give_back()
                    return None
                item: queue.Queued | Skip | None = None
                try:
                    with transactions.each() if claimed else no_transaction:
                        item = take()
                        seconds = self.handler_time()
                        if item is None or item is SKIPPED or self.stop.is_set():
                            self.budget.give_back()
                            if item is SKIPPED and not self.stop.is_set():
                                continue
                            return None if item is SKIPPED else item
                        loaded = self.handlers[name or keys.queue_of(item.key)]
                        outcome = deliver(
                            item,
                            loaded.handler,
                            claimed=claimed,
                            timeout=seconds,
                            policy=loaded.policy,
                        )
                except HungHandlers:
                    self.budget.give_back()
                    self.stop("hung handlers")
                    return item if isinstance(item, queue.Queued) else None
                self.record(item.key, outcome, name)
        return None

    def go_on(self, name: str | None = None) -> bool:
        """Whether to hand over another message (of queue `name`: not once its
        breaker paused it for this run)."""
        if self.stop.is_set():
            return False
        if name is not None and name in self.report.paused:
            return False
        if self.limit.spent():
            self.stop("time budget")
            return False
        if self.orphaned is not None and self.orphaned():
            logger.warning("drain worker lost its parent; stopping pid=%s", os.getpid())
            self.stop("parent gone")
            return False
        return True

    def handler_time(self) -> float | None:
        """The next handler's time limit (None: inline); a spent budget stops the run."""
        seconds = self.limit.seconds()
        if seconds is not None and seconds <= 0:
            self.stop("time budget")
        return seconds

    def record(self, key: bytes, outcome: Outcome, name: str | None) -> None:
        """Count one settled message, tell `on_outcome`, feed the breaker."""
        self.report.add(outcome)
        if self.on_outcome is not None:
            self.on_outcome(key, outcome)
        if self.breakers:
            self._count_for_breaker(outcome, name or keys.queue_of(key))
        if self.limit.spent():  # the budget ran out on this message: say so
            self.stop("time budget")

    def dropped(self, dropped: rows.Dropped) -> None:
        """A message the queue's rules dropped on the way (an `OnDrop`): it counts
        in the report once the drop has committed."""
        outcome = Outcome(str(dropped.reason))
        self.report.add(outcome)
        if self.on_drop is not None:
            self.on_drop(outcome)

    def _count_for_breaker(self, outcome: Outcome, name: str) -> None:
        """K failed attempts in a row (K the queue's breaker) stop the queue for the
        rest of the run; a delivery starts the count again."""
        breaker = self.handlers[name].policy.breaker
        if breaker is None:
            return
        if outcome in (Outcome.FAILED, Outcome.MAX_ATTEMPTS):
            self._failures_in_row[name] = failures = self._failures_in_row.get(name, 0) + 1
            if failures >= breaker:
                self.report.pause(name)
                logger.warning(
                    "queue paused for the rest of the pass queue=%s failures_in_a_row=%s",
                    name,
                    failures,
                )
        elif outcome in (Outcome.DELIVERED, Outcome.REQUEUED):
            self._failures_in_row[name] = 0
