"""The run loop: `Drainer` walks each queue up to its tail as the run started and
hands every message to `outcomes.deliver`.

SQLite has no row locks: one drain per queue at a time (`locking.QueueLock`),
rows read in pages with no transaction open, each outcome its own short
write. PostgreSQL and MySQL/MariaDB claim each row `FOR UPDATE SKIP LOCKED` in
the transaction that settles it, so drains share a queue (`workers` processes
here, or drains elsewhere) and a drain that dies releases its row.

Each queue is walked twice per pass (`queue.waiting`): the messages no backoff
holds, in key order, then the retries whose backoff ended before the pass
began; a message still waiting is never read. A queue's breaker (`policy`)
ends its walk after that many failed attempts in a row.

A run with a `budget` (the admin's and the API's) stops handing messages over
when it is spent, and gives each handler at most what is left of it
(`timeouts.TimeLimit`), so it returns in time even when a handler hangs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime

from django.db import DatabaseError

from deadletter import queue
from deadletter.drain.errors import DrainAborted, DrainConfigError
from deadletter.drain.handlers import Loaded, load_handlers
from deadletter.drain.locking import QueueLock
from deadletter.drain.outcomes import deliver
from deadletter.drain.report import DrainReport, Outcome
from deadletter.drain.timeouts import HungHandlers, TimeLimit, configured_handler_timeout
from deadletter.drain.workers import Budget, Cursor, Guard, Worker, WorkerPool
from deadletter.store import reconnect, sql

__all__ = ["PROGRESS_EVERY", "Drainer"]

logger = logging.getLogger("deadletter")

PROGRESS_EVERY = 5.0


class Drainer:
    """One drain run over `queues` (every configured queue by default).

    Handlers and options are checked here, before any row is read, so a bad
    configuration raises `DrainConfigError` having touched nothing. `run()`
    returns a `DrainReport`; `stop()` (from a signal handler or another
    thread) ends the run after the message in hand.

    `budget` (seconds from `run()`) bounds a run started from the web: no
    message is handed over after it, and a handler still running when it ends
    is given up on (`DEADLETTER_HANDLER_TIMEOUT` applies either way). `grace`
    is what the worker processes' `SignalGuard`s wait for the message in hand
    after a stop signal. With `ignore_backoff` (an operator's "now") every
    message goes in key order, waiting or not.

    With `workers` above 1 a run makes a `WorkerPool` and is its `Drain`: the
    pool forks, and in each worker calls back `enlist` and `work`, which run
    this class's claiming loop on the pool's shared cursors and budget.
    """

    def __init__(
        self,
        queues: Sequence[str] | None = None,
        *,
        limit: int | None = None,
        rate: float | None = None,
        workers: int = 1,
        wait: bool = False,
        batch_size: int = 500,
        on_outcome: Callable[[Outcome], None] | None = None,
        log_progress: bool = True,
        budget: float | None = None,
        grace: float | None = None,
        ignore_backoff: bool = False,
    ) -> None:
        if limit is not None and limit < 1:
            raise DrainConfigError(f"limit must be at least 1, got {limit}")
        if rate is not None and not rate > 0:
            raise DrainConfigError(f"rate must be above 0 per second, got {rate}")
        if workers < 1:
            raise DrainConfigError(f"workers must be at least 1, got {workers}")
        if budget is not None and not budget >= 0:
            raise DrainConfigError(f"budget must be at least 0 seconds, got {budget}")
        handler_timeout = configured_handler_timeout()
        self.handlers = load_handlers(queues)
        self.queues = list(self.handlers)
        self.claims = queue.can_claim_rows()
        if workers > 1 and not self.claims:
            raise DrainConfigError(
                f"--workers {workers} needs PostgreSQL or MySQL/MariaDB: "
                f"{queue.database_vendor()} cannot lock single rows (no SELECT ... FOR UPDATE "
                "SKIP LOCKED), so only one drain may walk a queue at a time; run one worker, "
                "or move the queue to PostgreSQL, MariaDB >= 10.6 or MySQL >= 8.0.1 to scale out"
            )
        self.limit = limit
        self.rate = rate
        self.workers = workers
        self.wait = wait
        self.batch_size = batch_size
        self.budget = budget
        self.grace = grace
        self.ignore_backoff = ignore_backoff
        self._limit = TimeLimit(handler_timeout)
        self.on_outcome = on_outcome
        self.log_progress = log_progress
        self.stopped_by: str | None = None
        self._stop = threading.Event()
        self._until: dict[str, bytes | None] = {}
        self._guard = Guard()  # no lock: one process (a worker's cursors come with theirs)
        self._cursors: dict[str, Cursor] = {}
        self._budget = Budget(limit, self._guard)
        self._worker: Worker | None = None
        self._next_at = 0.0
        self._progress_at = 0.0
        self._pass_start = datetime.now(UTC)
        self._failures_in_row: dict[str, int] = {}

    # -- control

    def stop(self, reason: str = "stop") -> None:
        """End the run after the message in hand (its row is settled first)."""
        if not self._stop.is_set():
            self.stopped_by = reason
            self._stop.set()

    def stopping(self) -> bool:
        """Whether the run was asked to stop (a pool passes it on to its workers)."""
        return self._stop.is_set()

    def pause_between_passes(self, seconds: float) -> None:
        """Wait `seconds` before the next pass, or until asked to stop."""
        self._stop.wait(seconds)

    def reconnect(self) -> None:
        """Begin a pass on a working connection, as Django begins a request: one
        that outlived `CONN_MAX_AGE` or no longer answers (a server restart, a
        failover, a killed session; Django's `is_usable`, one round trip) is
        closed, and the queue's database is connected now, raising the driver's
        `DatabaseError` if it cannot be reached. `serve` calls it before each
        pass; the pool's workers start each pass on connections of their own.

        The check asks the server, not Django's note of an earlier error: on
        MySQL/MariaDB a rollback on a lost connection clears that note."""
        connection = sql.connection()
        reconnect.recycle(connection)
        reconnect.close_if_lost(connection)
        connection.ensure_connection()

    @staticmethod
    def _close_if_lost() -> None:
        """After a database error: close the connection if it is gone, before the
        next statement, so the rest of the pass (the next queue, the pass's
        record) connects afresh. On MySQL/MariaDB a lost connection that is left
        open can wedge Django's transaction state for good (an autocommit that
        could not be put back, then a savepoint that could not be made)."""
        reconnect.close_if_lost(sql.connection())

    def pending(self) -> int | None:
        """Rows the run would visit now: a progress bar's total (None if unknown)."""
        try:
            return sum(queue.count_rows(name, self._tail(name)) for name in self.queues)
        except DatabaseError:
            return None

    def preview(self) -> Iterator[tuple[str, str, queue.Preview]]:
        """(queue, handler path, preview) for what a run would do, reading only;
        `limit` counts the messages that would be handed over."""
        left = self.limit
        now = datetime.now(UTC)
        for name in self.queues:
            path = self.handlers[name].path
            held = {} if self.ignore_backoff else dict(queue.waiting_keys(name, now, None))
            for item in queue.preview_failed_msgs(name, batch_size=self.batch_size):
                if item.verdict == "deliver" and item.key in held:
                    yield (
                        name,
                        path,
                        dataclasses.replace(item, verdict="waiting", due_at=held[item.key]),
                    )
                    continue
                if item.verdict == "deliver" and left is not None:
                    if left <= 0:
                        return
                    left -= 1
                yield name, path, item

    # -- the run

    def run(self) -> DrainReport:
        """One pass over the queues, up to each one's tail as the pass began; again
        and again from `drain.service`, each pass from a fresh start."""
        report = DrainReport(queues=list(self.queues), workers=self.workers)
        self._budget = Budget(self.limit, self._guard)
        self._cursors = {}
        self._until = {}
        self._failures_in_row = {}
        started = time.monotonic()
        self._progress_at = started + PROGRESS_EVERY
        if self.budget is not None:
            self._limit = TimeLimit(self._limit.timeout, started + self.budget)
        logger.info(
            "drain started queues=%s workers=%s limit=%s rate=%s",
            ",".join(self.queues),
            self.workers,
            self.limit,
            self.rate,
        )
        try:
            if self.workers > 1:
                self._run_workers(report)
            else:
                with self._queue_lock():
                    self._run_here(report)
        except DrainAborted as exc:
            report.aborted_by = exc.signame
            exc.report = report
            raise
        finally:
            report.elapsed = time.monotonic() - started
            report.stopped_by = report.stopped_by or self.stopped_by
            logger.info(
                "drain finished delivered=%s requeued=%s dropped=%s failed=%s held=%s "
                "waiting=%s paused=%s errors=%s elapsed=%.3f stopped_by=%s aborted_by=%s",
                report.delivered,
                report.requeued,
                report.dropped,
                report.failed,
                report.held,
                report.waiting,
                ",".join(report.paused) or "-",
                report.errors,
                report.elapsed,
                report.stopped_by,
                report.aborted_by,
            )
        self._record_pass(report)
        return report

    def _record_pass(self, report: DrainReport) -> None:
        """Note for the overview and the metrics how this pass left each queue."""
        if self._worker is not None or report.aborted_by:
            return
        try:
            queue.record_passes(self.queues, report.paused, datetime.now(UTC))
        except DatabaseError:
            logger.exception("drain could not record its pass")
            self._close_if_lost()

    def _run_workers(self, report: DrainReport) -> None:
        """The run in `workers` forked processes, each claiming rows up to the
        tails noted here, before the fork."""
        if not self._snapshot(report):
            return
        pool = WorkerPool(
            self, queues=self.queues, workers=self.workers, limit=self.limit, grace=self.grace
        )
        pool.run(report)

    # -- a worker process's share (called by its WorkerPool)

    def enlist(self, worker: Worker) -> None:
        """Become one worker of the pool, in the forked process: stop and pacing
        start afresh, claims go through the pool's shared cursors and budget,
        outcomes to the parent over the worker's pipe."""
        self._stop = threading.Event()
        self.stopped_by = None
        self._worker = worker
        self._cursors = worker.cursors
        self._budget = worker.budget
        self._next_at = 0.0

    def work(self, report: DrainReport) -> None:
        """A worker's share of the run: `_run_here` with the parent's snapshot of
        each queue's tail, checking for a stop (or a lost parent) between queues."""
        self._drain_queues(report, self._may_go_on)

    # -- the loops

    def _snapshot(self, report: DrainReport) -> bool:
        """Note each queue's newest key (the run stops there), the pass's start (a
        retry is due if its wait ended before it) and the messages that wait."""
        self._pass_start = datetime.now(UTC)
        try:
            self._until = {name: queue.tail_key(name) for name in self.queues}
            for name in self.queues:
                if self._until[name] is not None:
                    held = queue.waiting(name, self._pass_start)
                    report.add_waiting(held.count, held.next_due)
        except DatabaseError:
            logger.exception("drain cannot read the queues")
            report.errors += 1
            self._close_if_lost()
            return False
        return True

    def _tail(self, name: str) -> bytes | None:
        if name not in self._until:
            self._until[name] = queue.tail_key(name)
        return self._until[name]

    def _queue_lock(self) -> contextlib.AbstractContextManager[object]:
        db_file = None if self.claims else queue.sqlite_file()
        if db_file is None:
            return contextlib.nullcontext()
        return QueueLock(db_file, self.queues, wait=self.wait, stop=self._stop)

    def _run_here(self, report: DrainReport) -> None:
        if not self._snapshot(report):
            return
        self._drain_queues(report, lambda: not self._stop.is_set())

    def _drain_queues(self, report: DrainReport, go_on: Callable[[], bool]) -> None:
        """Each queue in turn up to the tail `_snapshot` noted, asking `go_on`
        before each; a database error ends that queue's turn, counted."""
        for name in self.queues:
            if not go_on():
                return
            until = self._until.get(name)
            if until is None:
                continue
            loaded = self.handlers[name]
            due_now = not self.ignore_backoff
            try:
                if self.claims:
                    self._drain_claiming(name, loaded, until, report, due_now)
                    if due_now:
                        self._drain_claiming_retries(name, loaded, until, report)
                else:
                    on_drop = self._counting_drops(report)
                    fresh = queue.iter_failed_msgs(
                        name, batch_size=self.batch_size, on_drop=on_drop, due_now=due_now
                    )
                    self._drain_scanning(name, loaded, until, report, fresh)
                    if not due_now:
                        continue
                    retries = queue.due_retries(
                        name,
                        self._pass_start,
                        until=until,
                        batch_size=self.batch_size,
                        on_drop=on_drop,
                    )
                    self._drain_scanning(name, loaded, until, report, retries)
            except DatabaseError:
                logger.exception("drain of a queue failed queue=%s", name)
                report.errors += 1
                self._close_if_lost()

    def _drain_scanning(
        self,
        name: str,
        loaded: Loaded,
        until: bytes,
        report: DrainReport,
        items: Iterator[queue.Queued],
    ) -> None:
        for item in items:
            if item.key > until or not self._may_go_on(name, report):
                return
            if not self._budget.take():
                return
            self._pace()
            seconds = self._handler_time()
            if self._stop.is_set():
                return
            try:
                outcome = deliver(item, loaded.handler, timeout=seconds, policy=loaded.policy)
            except HungHandlers:
                self.stop("hung handlers")
                return
            self._record(report, outcome, name)

    def _drain_claiming(
        self, name: str, loaded: Loaded, until: bytes, report: DrainReport, due_now: bool
    ) -> None:
        cursor = self._cursors.setdefault(name, Cursor(self._guard))
        on_drop = self._counting_drops(report)

        def take(after: bytes | None) -> queue.Queued | None:
            return queue.claim_failed_msg(
                name, after=after, until=until, on_drop=on_drop, due_now=due_now
            )

        self._claim_loop(name, loaded, report, lambda: cursor.claim(take))

    def _drain_claiming_retries(
        self, name: str, loaded: Loaded, until: bytes, report: DrainReport
    ) -> None:
        """The due retries, each claimed past this worker's own cursor: a retry
        another worker handled has left the set (delivered, or due after the pass began)."""
        on_drop = self._counting_drops(report)
        after: queue.RetryCursor | None = None

        def take() -> queue.Queued | None:
            nonlocal after
            item, after = queue.claim_due_retry(
                name, self._pass_start, after=after, until=until, on_drop=on_drop
            )
            return item

        self._claim_loop(name, loaded, report, take)

    def _claim_loop(
        self,
        name: str,
        loaded: Loaded,
        report: DrainReport,
        claim: Callable[[], queue.Queued | None],
    ) -> None:
        while self._may_go_on(name, report):
            if not self._budget.take():
                return
            self._pace()
            if self._stop.is_set():
                self._budget.give_back()
                return
            try:
                with queue.atomic():
                    item = claim()
                    seconds = self._handler_time()
                    if item is None or self._stop.is_set():
                        self._budget.give_back()
                        return
                    outcome = deliver(
                        item,
                        loaded.handler,
                        savepoint=True,
                        timeout=seconds,
                        policy=loaded.policy,
                    )
            except HungHandlers:
                self._budget.give_back()
                self.stop("hung handlers")
                return
            self._record(report, outcome, name)

    def _may_go_on(self, name: str | None = None, report: DrainReport | None = None) -> bool:
        """Whether to hand over another message (of queue `name`: not once its
        breaker stopped it for this pass)."""
        if self._stop.is_set():
            return False
        if report is not None and name in report.paused:
            return False
        if self._limit.spent():
            self.stop("time budget")
            return False
        if self._worker is not None and self._worker.orphaned():
            logger.warning("drain worker lost its parent; stopping pid=%s", os.getpid())
            self.stop("parent gone")
            return False
        return True

    def _handler_time(self) -> float | None:
        """The next handler's time limit (None: inline); a spent budget stops the run."""
        seconds = self._limit.seconds()
        if seconds is not None and seconds <= 0:
            self.stop("time budget")
        return seconds

    def _pace(self) -> None:
        """Hold deliveries to `rate` per second (split among the workers)."""
        if self.rate is None:
            return
        now = time.monotonic()
        if self._next_at > now:
            self._stop.wait(self._next_at - now)
            now = time.monotonic()
        self._next_at = max(self._next_at, now) + self.workers / self.rate

    def _record(self, report: DrainReport, outcome: Outcome, name: str) -> None:
        report.add(outcome)
        self.notify(outcome)
        self._count_for_breaker(report, outcome, name)
        if self._limit.spent():  # the budget ran out on this message: say so
            self.stop("time budget")
        if self.log_progress and self._worker is None:
            now = time.monotonic()
            if now >= self._progress_at:
                self._progress_at = now + PROGRESS_EVERY
                logger.info(
                    "drain progress handled=%s delivered=%s requeued=%s failed=%s dropped=%s",
                    report.handled,
                    report.delivered,
                    report.requeued,
                    report.failed,
                    sum(report.dropped.values()),
                )

    def _count_for_breaker(self, report: DrainReport, outcome: Outcome, name: str) -> None:
        """K failed attempts in a row (K the queue's breaker) stop the queue for the
        rest of the pass; a delivery starts the count again."""
        breaker = self.handlers[name].policy.breaker
        if breaker is None:
            return
        if outcome in (Outcome.FAILED, Outcome.MAX_ATTEMPTS):
            self._failures_in_row[name] = failures = self._failures_in_row.get(name, 0) + 1
            if failures >= breaker:
                report.pause(name)
                logger.warning(
                    "queue paused for the rest of the pass queue=%s failures_in_a_row=%s",
                    name,
                    failures,
                )
        elif outcome in (Outcome.DELIVERED, Outcome.REQUEUED):
            self._failures_in_row[name] = 0

    def notify(self, outcome: Outcome) -> None:
        """One settled message, to `on_outcome`: in a worker by way of the
        parent, whose pool calls this again there with what the worker sent."""
        if self._worker is not None:
            self._worker.report_outcome(outcome)
        elif self.on_outcome is not None:
            self.on_outcome(outcome)

    def _counting_drops(self, report: DrainReport) -> queue.OnDrop:
        """What the queue drops on the way (expired, corrupt) counts in the report
        once the drop has committed; the drain's own drops count by outcome."""

        def on_drop(dropped: queue.Dropped) -> None:
            outcome = Outcome(str(dropped.reason))
            report.add(outcome)
            self.notify(outcome)

        return on_drop
