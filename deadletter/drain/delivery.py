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

With `concurrency` above 1 up to that many handlers run at once, each in a thread
(`concurrency.Lanes`), while the caller's thread starts them one by one in key
order, under the same budget, pace, breaker and stop, and records each outcome.
On SQLite the caller's thread also reads and settles every message (one
connection writes); a lane only calls the handler, and what it returned or
raised is replayed into `deliver` there. On a server each lane claims, handles
and settles in claim transactions of its own connection, as above; the caller
waits for each claimed message's handler to start before the next claim.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import logging
import os
import queue as queues
import threading
import time
from collections.abc import Callable, Mapping

from deadletter import queue
from deadletter.drain.concurrency import MAX_CONCURRENCY, Lanes
from deadletter.drain.context import context_of
from deadletter.drain.errors import DrainAborted, DrainConfigError
from deadletter.drain.handlers import Handler, Loaded
from deadletter.drain.inflight import Journal, journal
from deadletter.drain.outcomes import deliver
from deadletter.drain.report import DrainReport, Outcome
from deadletter.drain.timeouts import HungHandlers, TimeLimit, call_within
from deadletter.drain.workers import Budget, Guard
from deadletter.queue import claims as queue_claims
from deadletter.queue import rows
from deadletter.queue.claim_transactions import ClaimTransactions
from deadletter.wire import keys
from deadletter.wire.messages import Message

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
    With `concurrency` above 1 up to that many messages are in hand at once
    (`_hand_over_together`); `on_outcome` and `on_drop` are still called one at a
    time. `actor` is who the failed attempts are recorded as (`queue.history`);
    each handler in hand is journaled (`inflight`), so a kill of the process counts.
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
    concurrency: int = 1
    actor: str = "drain"
    claims: bool = dataclasses.field(init=False)
    journal: Journal | None = dataclasses.field(init=False)
    _failures_in_row: dict[str, int] = dataclasses.field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        if not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise DrainConfigError(
                f"concurrency must be from 1 to {MAX_CONCURRENCY}, got {self.concurrency}"
            )
        self.claims = queue_claims.can_claim_rows()
        self.journal = journal()

    def hand_over(self, take: Take, name: str | None = None) -> queue.Queued | None:
        """Hand over what `take` gives, each message to its queue's handler, until it
        gives None, the run stops, or the breaker pauses queue `name`. Returns the
        message it took and then did not hand over (a stop came between), if any.
        A database error passes through, the message in hand left as it was."""
        if self.concurrency > 1:
            return self._hand_over_together(take, name)
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
                            actor=self.actor,
                            journal=self.journal,
                            takes_context=loaded.takes_context,
                        )
                except HungHandlers:
                    self.budget.give_back()
                    self.stop("hung handlers")
                    return item if isinstance(item, queue.Queued) else None
                self.record(item.key, outcome, name)
        return None

    def _hand_over_together(self, take: Take, name: str | None) -> queue.Queued | None:
        """`hand_over` with up to `concurrency` messages in hand at once: each started
        here in key order, once the one before it is in its handler's hands, after
        the same checks (stop, breaker, time budget, `--limit`, pace); each outcome
        recorded here as its handler ends, so they may end out of order. A stop or
        an opened breaker starts no new message and waits for those in hand. An
        error (a database's, a handler's `BaseException`) passes through once the
        others in hand are settled; an abort (`DrainAborted`) passes through at
        once, the messages in hand left as they are."""
        done: queues.SimpleQueue[_Job] = queues.SimpleQueue()
        in_hand = 0
        failure: BaseException | None = None
        untaken: queue.Queued | None = None
        with Lanes(self.concurrency, self._lane_context) as lanes:
            while failure is None:
                while in_hand and not done.empty():
                    failure = self._finish(done.get(), name) or failure
                    in_hand -= 1
                if failure is not None or not self.go_on(name):
                    break
                if in_hand >= self.concurrency:
                    failure = self._finish(done.get(), name)
                    in_hand -= 1
                    continue
                if not self.budget.take():
                    break
                if self.pace is not None:
                    self.pace()
                if self.stop.is_set():
                    self.budget.give_back()
                    break
                job = self._start(lanes, take, name, done, in_hand + 1)
                if job.handed:
                    in_hand += 1
                    continue
                self.budget.give_back()
                if isinstance(job.raised, HungHandlers):
                    self.stop("hung handlers")
                elif job.raised is not None:
                    failure = job.raised
                elif job.item is SKIPPED and not self.stop.is_set():
                    continue
                untaken = job.item if isinstance(job.item, queue.Queued) else None
                break
            while in_hand:
                failure = self._finish(done.get(), name) or failure
                in_hand -= 1
        if failure is not None:
            raise failure
        return untaken

    def _start(
        self,
        lanes: Lanes[ClaimTransactions | None],
        take: Take,
        name: str | None,
        done: queues.SimpleQueue[_Job],
        busy: int,
    ) -> _Job:
        """Take the next message and start its handler in a lane; returns once the
        handler began (`handed`) or it is known that none will (nothing taken, a
        stop, an error in `raised`). On SQLite the message is taken here, on a
        server the lane claims it in its own transaction."""
        job = _Job()
        if self.claims:
            lanes.submit(lambda lane: self._claim(lane, job, take, name, done), busy=busy)
            job.started.wait()
            return job
        try:
            job.item = item = take()
        except Exception as exc:  # a database error: raised once those in hand are settled
            job.raised = exc
            return job
        seconds = self.handler_time()
        if item is None or item is SKIPPED or self.stop.is_set():
            return job
        loaded = self.handlers[name or keys.queue_of(item.key)]
        lanes.submit(
            lambda lane: _call(job, loaded, seconds, done, self.journal, self.actor), busy=busy
        )
        job.started.wait()
        return job

    def _lane_context(self) -> contextlib.AbstractContextManager[ClaimTransactions | None]:
        """A lane's own claim transactions on a server (its thread's connection)."""
        if self.claims:
            return ClaimTransactions(autocommit_between=self.autocommit_between)
        return contextlib.nullcontext()

    def _claim(
        self,
        transactions: ClaimTransactions | None,
        job: _Job,
        take: Take,
        name: str | None,
        done: queues.SimpleQueue[_Job],
    ) -> None:
        """In a lane, on a server: claim the next message, hand it over and settle it
        in one transaction of the lane's connection, as `hand_over` does."""
        assert transactions is not None
        try:
            with transactions.each():
                job.item = item = take()
                seconds = self.handler_time()
                if item is None or item is SKIPPED or self.stop.is_set():
                    return
                loaded = self.handlers[name or keys.queue_of(item.key)]
                job.outcome = deliver(
                    item,
                    _Starting(loaded.handler, job),
                    claimed=True,
                    timeout=seconds,
                    policy=loaded.policy,
                    actor=self.actor,
                    journal=self.journal,
                    takes_context=loaded.takes_context,
                )
        except BaseException as exc:  # for the caller's thread, which raises it
            job.raised = exc
        finally:
            job.end(done)

    def _finish(self, job: _Job, name: str | None) -> BaseException | None:
        """Settle (SQLite: here, replaying what the handler did into `deliver`) and
        record one message whose handler ended; returns the error that left its row
        as it was instead."""
        item = job.item
        assert isinstance(item, queue.Queued)
        if self.claims:
            if job.raised is not None:
                return job.raised
            outcome = job.outcome
        else:
            try:
                policy = self.handlers[name or keys.queue_of(item.key)].policy
                outcome = deliver(
                    item, job.replay, policy=policy, actor=self.actor, replayed=job.ran
                )
            except DrainAborted:
                raise
            except BaseException as exc:  # the handler's own (SystemExit), or the database's
                return exc
        assert outcome is not None
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


@dataclasses.dataclass(eq=False)
class _Job:
    """One message in a lane. Until `started` is set only the lane writes it; then,
    when `handed` (its handler began), it is the caller's once the lane has put it
    on the done queue; otherwise it is finished as it is."""

    item: queue.Queued | Skip | None = None
    started: threading.Event = dataclasses.field(default_factory=threading.Event)
    handed: bool = False
    outcome: Outcome | None = None
    returned: object = None
    raised: BaseException | None = None
    ran: float = 0.0
    """How long its handler ran, in seconds (a lane's, replayed on SQLite)."""

    def end(self, done: queues.SimpleQueue[_Job]) -> None:
        """The lane is done with it: to the caller's done queue when its handler began,
        else told to the caller waiting for the start."""
        if self.handed:
            done.put(self)
        else:
            self.started.set()

    def replay(self, msg: Message, *context: object) -> Message | None:
        """What the handler did, again, for `deliver` in the caller's thread."""
        if self.raised is not None:
            raise self.raised
        return self.returned  # type: ignore[return-value]  # deliver checks its type


class _Starting:
    """A handler that says it began (`_Job.handed`, `started`) before it runs."""

    __slots__ = ("_handler", "_job")

    def __init__(self, handler: Handler, job: _Job) -> None:
        self._handler = handler
        self._job = job

    def __call__(self, msg: Message, *context: object) -> Message | None:
        self._job.handed = True
        self._job.started.set()
        return self._handler(msg, *context)


def _call(
    job: _Job,
    loaded: Loaded,
    seconds: float | None,
    done: queues.SimpleQueue[_Job],
    journal: Journal | None,
    actor: str,
) -> None:
    """In a lane, on SQLite: only the handler's call (under its time limit, journaled,
    timed); what it returned or raised goes back to the caller's thread, which
    settles the row."""
    assert isinstance(job.item, queue.Queued)
    starting = _Starting(loaded.handler, job)
    context = context_of(job.item, seconds) if loaded.takes_context else None
    slot = None if journal is None else journal.enter(job.item.key, actor.encode())
    started = time.monotonic()
    try:
        if context is None and seconds is None:
            job.returned = starting(job.item.msg)
        elif seconds is None:
            job.returned = starting(job.item.msg, context)
        else:
            job.returned = call_within(
                starting, job.item.msg, seconds, key=job.item.key, context=context
            )
    except BaseException as exc:  # replayed in the caller's thread
        job.raised = exc
    finally:
        job.ran = time.monotonic() - started
        if journal is not None:
            journal.leave(slot)
        job.end(done)
