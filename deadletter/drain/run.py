"""A drain run: `Drainer` walks each queue up to its tail as the run started and
hands its messages over through the one delivery loop (`delivery.Delivery`).

SQLite has no row locks: one drain per queue at a time (`locking.QueueLock`),
rows read in pages with no transaction open, each outcome its own short
write. PostgreSQL and MySQL/MariaDB claim each row `FOR UPDATE SKIP LOCKED` in
the transaction that settles it, so drains share a queue (`workers` processes
here, or drains elsewhere) and a drain that dies releases its row.

Each queue is walked twice per pass (`waiting.waiting`): the messages no backoff
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
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime

from django.db import DatabaseError

from deadletter import queue
from deadletter.conf import conf
from deadletter.drain import inflight, kills
from deadletter.drain.delivery import Delivery, Pace, Stop, Take
from deadletter.drain.errors import DrainAborted, DrainConfigError
from deadletter.drain.handlers import load_handlers
from deadletter.drain.locking import QueueLock
from deadletter.drain.options import DrainOptions
from deadletter.drain.report import DrainReport, Outcome
from deadletter.drain.stopping import SignalGuard
from deadletter.drain.timeouts import TimeLimit, configured_handler_timeout
from deadletter.drain.workers import Budget, Cursor, Guard, Worker, WorkerPool
from deadletter.queue import browse, claim_transactions, claims, waiting
from deadletter.store import reconnect, sql
from deadletter.wire import keys

__all__ = ["PROGRESS_EVERY", "Drainer"]

logger = logging.getLogger("deadletter")

PROGRESS_EVERY = 5.0


class Drainer:
    """One drain run over `queues` (every configured queue by default), as
    `options` (a `DrainOptions`) ask.

    Handlers and options are checked here, before any row is read, so a bad
    configuration raises `DrainConfigError` having touched nothing. `run()`
    returns a `DrainReport`; `stop()` (from a signal handler or another
    thread) ends the run after the message in hand. `on_outcome` hears of each
    settled message (a progress bar); `log_progress` logs a line every
    `PROGRESS_EVERY` seconds.

    With `workers` above 1 a run makes a `WorkerPool`: the pool forks, and in
    each worker calls back `_work_as_worker`, which hands messages over on the
    pool's shared cursors and budget. With `concurrency` above 1 each process
    (each worker) has that many messages in hand at once.
    """

    def __init__(
        self,
        queues: Sequence[str] | None = None,
        options: DrainOptions | None = None,
        *,
        on_outcome: Callable[[Outcome], None] | None = None,
        log_progress: bool = True,
    ) -> None:
        self.options = options = options or DrainOptions()
        handler_timeout = configured_handler_timeout()
        if (problem := kills.max_kills_problem(conf.MAX_KILLS)) is not None:
            raise DrainConfigError(problem)
        self.handlers = load_handlers(queues)
        self.queues = list(self.handlers)
        self.claims = claims.can_claim_rows()
        if options.workers > 1 and not self.claims:
            raise DrainConfigError(
                f"--workers {options.workers} needs PostgreSQL or MySQL/MariaDB: "
                f"{claims.database_vendor()} cannot lock single rows (no SELECT ... FOR UPDATE "
                "SKIP LOCKED), so only one drain may walk a queue at a time; run one worker, "
                "or move the queue to PostgreSQL, MariaDB >= 10.6 or MySQL >= 8.0.1 to scale out"
            )
        self.on_outcome = on_outcome
        self.log_progress = log_progress
        self._timeout = handler_timeout
        self._stop = Stop()
        self._pace = self._new_pace()
        self._until: dict[str, bytes | None] = {}
        self._guard = Guard()  # no lock: one process (a worker's cursors come with theirs)
        self._cursors: dict[str, Cursor] = {}
        self._budget = Budget(options.limit, self._guard)
        self._worker: Worker | None = None
        self._progress_at = 0.0
        self._deadline: float | None = None
        self._pass_start = datetime.now(UTC)

    # -- control

    @property
    def stopped_by(self) -> str | None:
        """Why the run was stopped ("stop", "time budget", "hung handlers", ...), or None."""
        return self._stop.reason

    def stop(self, reason: str = "stop") -> None:
        """End the run after the message in hand (its row is settled first)."""
        self._stop(reason)

    def stopping(self) -> bool:
        """Whether the run was asked to stop (`serve` ends its passes on it)."""
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
            return sum(claims.count_rows(name, self._tail(name)) for name in self.queues)
        except DatabaseError:
            return None

    def preview(self) -> Iterator[tuple[str, str, claims.Preview]]:
        """(queue, handler path, preview) for what a run would do, reading only;
        `limit` counts the messages that would be handed over."""
        left = self.options.limit
        now = datetime.now(UTC)
        for name in self.queues:
            path = self.handlers[name].path
            held = (
                {} if self.options.ignore_backoff else dict(waiting.waiting_keys(name, now, None))
            )
            for item in claims.preview_failed_msgs(name, batch_size=self.options.batch_size):
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
        options = self.options
        report = DrainReport(queues=list(self.queues), workers=options.workers)
        self._budget = Budget(options.limit, self._guard)
        self._cursors = {}
        self._until = {}
        started = time.monotonic()
        self._progress_at = started + PROGRESS_EVERY
        self._deadline = None if options.budget is None else started + options.budget
        logger.info(
            "drain started queues=%s workers=%s concurrency=%s limit=%s rate=%s",
            ",".join(self.queues),
            options.workers,
            options.concurrency,
            options.limit,
            options.rate,
        )
        try:
            if options.workers > 1:
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
            waiting.record_passes(self.queues, report.paused, datetime.now(UTC))
        except DatabaseError:
            logger.exception("drain could not record its pass")
            self._close_if_lost()

    def _run_workers(self, report: DrainReport) -> None:
        """The run in `workers` forked processes, each claiming rows up to the
        tails noted here, before the fork."""
        if not self._snapshot(report):
            return
        options = self.options
        pool = WorkerPool(
            queues=self.queues,
            workers=options.workers,
            limit=options.limit,
            stop=self._stop,
            on_outcome=self.notify,
            work=self._work_as_worker,
        )
        pool.run(report)

    # -- a worker process's share (called by its WorkerPool)

    def _work_as_worker(self, worker: Worker, report: DrainReport) -> None:
        """A worker's share of the run, in the forked process: stop and pacing
        start afresh, claims go through the pool's shared cursors and budget,
        outcomes to the parent over the worker's pipe; each queue is walked up
        to the parent's snapshot of its tail, checking for a stop (or a lost
        parent) between queues. A stop waits `grace` for the message in hand,
        as the parent does."""
        self._stop = Stop()
        self._pace = self._new_pace()
        self._worker = worker
        self._cursors = worker.cursors
        self._budget = worker.budget
        try:
            with SignalGuard(self.stop, (signal.SIGTERM,), grace=self.options.grace):
                try:
                    self._drain_queues(self._delivery(report))
                except DrainAborted as exc:
                    report.aborted_by = exc.signame
        finally:
            report.stopped_by = self.stopped_by

    def notify(self, outcome: Outcome) -> None:
        """One settled message, to `on_outcome`: in a worker by way of the
        parent, whose pool calls this again there with what the worker sent."""
        if self._worker is not None:
            self._worker.report_outcome(outcome)
        elif self.on_outcome is not None:
            self.on_outcome(outcome)

    # -- the passes

    def _new_pace(self) -> Pace | None:
        rate = self.options.rate
        return None if rate is None else Pace(rate, self.options.workers, self._stop)

    def _delivery(self, report: DrainReport) -> Delivery:
        """This run's loop: its stop, time limit, budget and pace; outcomes to
        `notify` (and the progress line)."""
        worker = self._worker

        def settled(key: bytes, outcome: Outcome) -> None:
            self.notify(outcome)
            self._log_progress(report)

        return Delivery(
            handlers=self.handlers,
            report=report,
            stop=self._stop,
            limit=TimeLimit(self._timeout, self._deadline),
            budget=self._budget,
            pace=self._pace,
            on_outcome=settled,
            on_drop=self.notify,
            orphaned=None if worker is None else worker.orphaned,
            concurrency=self.options.concurrency,
            actor=self.options.actor,
        )

    def _snapshot(self, report: DrainReport) -> bool:
        """Note each queue's newest key (the run stops there), the pass's start (a
        retry is due if its wait ended before it) and the messages that wait."""
        self._pass_start = datetime.now(UTC)
        self._count_killed()
        try:
            self._until = {name: claims.tail_key(name) for name in self.queues}
            for name in self.queues:
                if self._until[name] is not None:
                    held = waiting.waiting(name, self._pass_start)
                    report.add_waiting(held.count, held.next_due)
        except DatabaseError:
            logger.exception("drain cannot read the queues")
            report.errors += 1
            self._close_if_lost()
            return False
        return True

    def _count_killed(self) -> None:
        """Count the attempts whose handlers' processes died mid-handler (their
        journals, `inflight`), for the queues this run hands over, and set aside a
        message killed `DEADLETTER_MAX_KILLS` times (`kills`): on SQLite under the
        queues' lock, on a server each row claimed first (one another drain holds is
        left in the journal for a later pass)."""

        def settle(killed: inflight.Killed) -> bool:
            policy = self.handlers[keys.queue_of(killed.key)].policy
            with claim_transactions.atomic() if self.claims else contextlib.nullcontext():
                item = claims.fetch_msg(killed.key)
                if item is None:
                    return not self.claims or browse.get_row(killed.key) is None
                outcome = kills.settle(item, killed, policy)
            logger.warning(
                "counted the attempt of a killed handler key=%s pid=%s outcome=%s",
                killed.key.hex(),
                killed.pid,
                outcome,
            )
            return True

        try:
            inflight.recover(settle, lambda key: keys.queue_of(key) in self.handlers)
        except (DatabaseError, OSError):
            logger.exception("drain could not count killed handlers' attempts")
            self._close_if_lost()

    def _tail(self, name: str) -> bytes | None:
        if name not in self._until:
            self._until[name] = claims.tail_key(name)
        return self._until[name]

    def _queue_lock(self) -> contextlib.AbstractContextManager[object]:
        db_file = None if self.claims else claims.sqlite_file()
        if db_file is None:
            return contextlib.nullcontext()
        return QueueLock(db_file, self.queues, wait=self.options.wait, stop=self._stop)

    def _run_here(self, report: DrainReport) -> None:
        if self._snapshot(report):
            self._drain_queues(self._delivery(report))

    def _drain_queues(self, delivery: Delivery) -> None:
        """Each queue in turn up to the tail `_snapshot` noted: its messages no
        backoff holds, then its due retries; a database error ends that queue's
        turn, counted."""
        for name in self.queues:
            if not delivery.go_on():
                return
            until = self._until.get(name)
            if until is None:
                continue
            due_now = not self.options.ignore_backoff
            try:
                delivery.hand_over(self._fresh(name, until, due_now, delivery), name)
                if due_now:
                    delivery.hand_over(self._retries(name, until, delivery), name)
            except DatabaseError:
                logger.exception("drain of a queue failed queue=%s", name)
                delivery.report.errors += 1
                self._close_if_lost()

    def _fresh(self, name: str, until: bytes, due_now: bool, delivery: Delivery) -> Take:
        """The queue's messages in key order (with `due_now`, those no backoff
        holds): claimed past the run's shared cursor on a server, so no two
        workers take one; read in pages on SQLite."""
        if not self.claims:
            return _up_to(
                until,
                queue.iter_failed_msgs(
                    name,
                    batch_size=self.options.batch_size,
                    on_drop=delivery.dropped,
                    due_now=due_now,
                ),
            )
        cursor = self._cursors.setdefault(name, Cursor(self._guard))

        def claim(after: bytes | None) -> queue.Queued | None:
            return claims.claim_failed_msg(
                name, after=after, until=until, on_drop=delivery.dropped, due_now=due_now
            )

        return lambda: cursor.claim(claim)

    def _retries(self, name: str, until: bytes, delivery: Delivery) -> Take:
        """The retries whose backoff ended before the pass began, soonest due
        first; on a server each claimed past this worker's own cursor (a retry
        another worker handled has left the set: delivered, or due after the pass
        began)."""
        if not self.claims:
            return _up_to(
                until,
                waiting.due_retries(
                    name,
                    self._pass_start,
                    until=until,
                    batch_size=self.options.batch_size,
                    on_drop=delivery.dropped,
                ),
            )
        after: waiting.RetryCursor | None = None

        def take() -> queue.Queued | None:
            nonlocal after
            item, after = waiting.claim_due_retry(
                name, self._pass_start, after=after, until=until, on_drop=delivery.dropped
            )
            return item

        return take

    def _log_progress(self, report: DrainReport) -> None:
        if not self.log_progress or self._worker is not None:
            return
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


def _up_to(until: bytes, items: Iterator[queue.Queued]) -> Take:
    """A source of `items` that ends at the first key past `until`."""

    def take() -> queue.Queued | None:
        item = next(items, None)
        return item if item is not None and item.key <= until else None

    return take
