"""Running a stored redrive (`run_redrive`) and carrying on unfinished ones
(`resume_redrives`, the service's `redrive_turn`).

A run claims its row (planned -> running, `runner` "host:pid", a heartbeat) by one
conditional UPDATE, so two processes never run one redrive. It walks the keys
its filter matches from `cursor` up to `until`; without a destination each
message goes through the one delivery loop (`Delivery.hand_over`) under the
drain's outcome rules, with a destination each row is moved (`queue.moves`).
After each message the counts and the cursor, the last key settled, are written
to the row: a run killed between a message's settlement and that write hands it
over again when resumed, and no other.

A watcher thread re-reads the row every second (a cancel stops the run after the
message in hand; a runner that is no longer this process stops too) and writes
the heartbeat. A running redrive whose heartbeat is older than `STALE_AFTER`, or
whose runner was a process of this host that is gone, is taken over by
`resume_redrives`.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta

from django.db import DatabaseError, connections

from deadletter import queue
from deadletter.conf import conf
from deadletter.drain.delivery import SKIPPED, Delivery, Pace, Skip, Stop
from deadletter.drain.errors import DrainConfigError
from deadletter.drain.handlers import load_handlers
from deadletter.drain.locking import QueueLock
from deadletter.drain.redrive_match import Filter
from deadletter.drain.redrives import RedriveError, redrive_filter
from deadletter.drain.report import DrainReport, Outcome
from deadletter.drain.timeouts import TimeLimit, configured_handler_timeout
from deadletter.drain.workers import Budget, Guard
from deadletter.models import QueuedMessage, Redrive
from deadletter.queue import claims, moves
from deadletter.store import reconnect, sql

__all__ = [
    "DEFAULT_STEP",
    "RELEASE",
    "STALE_AFTER",
    "is_stale",
    "redrive_turn",
    "resume_redrives",
    "run_redrive",
    "runner_name",
]

logger = logging.getLogger("deadletter")

STALE_AFTER = 30.0
"""Seconds without a heartbeat after which a running redrive's runner counts as gone."""
HEARTBEAT_EVERY = 5.0
CHECK_EVERY = 1.0
"""How often a run re-reads its row for a cancel."""
DEFAULT_STEP = 100
"""A step's size, for `stop_after`, when no ramp is given."""
WALK_BATCH = 100
RELEASE = "release"
"""The stop reason that hands the redrive back as planned (the service's turn ended,
or the service is stopping): any runner carries on from its cursor."""

FAILED_AGAIN = (Outcome.FAILED, Outcome.HELD, Outcome.MAX_ATTEMPTS, Outcome.PERMANENT)
_DELIVERED = (Outcome.DELIVERED, Outcome.REQUEUED)
_DROPPED = (Outcome.PERMANENT, Outcome.MAX_ATTEMPTS, Outcome.EXPIRED, Outcome.CORRUPT)

OnProgress = Callable[[Redrive], None]


def runner_name() -> str:
    """This process as a redrive's `runner`: `host:pid`."""
    return f"{socket.gethostname()}:{os.getpid()}"


def is_stale(redrive: Redrive, now: datetime | None = None) -> bool:
    """Whether a running redrive's runner is gone: a process of this host that no
    longer exists, or no heartbeat for `STALE_AFTER` seconds."""
    if redrive.status != Redrive.Status.RUNNING:
        return False
    host, _, pid = redrive.runner.rpartition(":")
    here = host == socket.gethostname() and pid.isdigit() and int(pid) != os.getpid()
    if here and not _alive(int(pid)):
        return True
    now = now or datetime.now(UTC)
    beat = redrive.heartbeat_at
    return beat is None or now - beat > timedelta(seconds=STALE_AFTER)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def run_redrive(
    redrive_id: int,
    *,
    on_progress: OnProgress | None = None,
    stop: Stop | None = None,
    resume: bool = False,
    deadline: float | None = None,
    halted: Callable[[], bool] | None = None,
) -> Redrive:
    """Run redrive `redrive_id` to its end in this process and return its row.

    It must be planned, or running with a gone runner (`is_stale`); with `resume`
    also stopped or failed. `RedriveError` otherwise, nothing changed. `stop` (set
    from a signal handler or another thread) ends it after the message in hand:
    its reason becomes the row's (status stopped), except `RELEASE`, which hands
    it back as planned, as a spent `deadline` (a `time.monotonic()` instant) and
    a true `halted()` do. `on_progress` hears of each write of the row."""
    redrive = _claim(redrive_id, resume=resume)
    run = _Run(redrive, stop or Stop(), on_progress, deadline, halted)
    return run.go()


def _claim(redrive_id: int, *, resume: bool) -> Redrive:
    """Make this process the redrive's runner by one conditional UPDATE on the row as
    read, so of two processes claiming it at once one wins."""
    rows = Redrive.objects.using(conf.DATABASE)
    redrive = rows.filter(pk=redrive_id).first()
    if redrive is None:
        raise RedriveError(f"no redrive {redrive_id}")
    status = redrive.status
    allowed = status == Redrive.Status.PLANNED or is_stale(redrive)
    if resume and status in (Redrive.Status.STOPPED, Redrive.Status.FAILED):
        allowed = True
    if not allowed:
        if status == Redrive.Status.RUNNING:
            raise RedriveError(f"{redrive} is being run by {redrive.runner}")
        raise RedriveError(f"{redrive} cannot be run: it is {status}")
    now = datetime.now(UTC)
    claimed = rows.filter(
        pk=redrive_id, status=status, runner=redrive.runner, heartbeat_at=redrive.heartbeat_at
    ).update(
        status=Redrive.Status.RUNNING,
        runner=runner_name(),
        heartbeat_at=now,
        started_at=redrive.started_at or now,
        finished_at=None,
        reason="",
    )
    if not claimed:
        raise RedriveError(f"{redrive} was taken by another runner")
    redrive.refresh_from_db(using=conf.DATABASE)
    logger.info(
        "redrive running id=%s queue=%s destination=%s cursor=%s matched=%s",
        redrive.pk,
        redrive.queue,
        redrive.destination or "-",
        redrive.cursor.hex() if redrive.cursor else "-",
        redrive.matched,
    )
    return redrive


def resume_redrives(
    redrive_id: int | None = None,
    *,
    on_progress: OnProgress | None = None,
    stop: Stop | None = None,
    queues: Sequence[str] | None = None,
) -> list[Redrive]:
    """Carry on unfinished redrives one after another: `redrive_id` alone (planned,
    stopped, failed, or running with a gone runner), or, without it, every planned
    one and every running one whose runner is gone, oldest first (of `queues`
    only, when given). Returns the rows as their runs left them."""
    stop = stop or Stop()
    if redrive_id is not None:
        return [run_redrive(redrive_id, on_progress=on_progress, stop=stop, resume=True)]
    done = []
    for candidate in _unfinished(queues):
        if stop.is_set():
            break
        try:
            done.append(run_redrive(candidate, on_progress=on_progress, stop=stop))
        except RedriveError as exc:
            logger.info("redrive left to another runner id=%s: %s", candidate, exc)
    return done


def _unfinished(queues: Sequence[str] | None) -> list[int]:
    """Planned redrives and running ones with a gone runner, oldest first."""
    rows = Redrive.objects.using(conf.DATABASE).filter(
        status__in=[Redrive.Status.PLANNED, Redrive.Status.RUNNING]
    )
    found = []
    for redrive in rows.order_by("id"):
        if queues is not None and redrive.queue not in queues and not redrive.destination:
            continue  # no handler here; a move needs none
        if redrive.status == Redrive.Status.PLANNED or is_stale(redrive):
            found.append(redrive.pk)
    return found


def redrive_turn(*, queues: Sequence[str], seconds: float, halted: Callable[[], bool]) -> int:
    """The drain service's turn for redrives: run planned (and abandoned) ones of
    `queues` for up to `seconds`, then hand the one in progress back as planned,
    to carry on at the next turn. Returns how many it ran."""
    deadline = time.monotonic() + seconds
    ran = 0
    for candidate in _unfinished(queues):
        if halted() or time.monotonic() >= deadline:
            break
        try:
            run_redrive(candidate, deadline=deadline, halted=halted)
        except RedriveError as exc:
            logger.info("redrive left to another runner id=%s: %s", candidate, exc)
            continue
        ran += 1
    return ran


@dataclasses.dataclass
class _Step:
    """One step of the ramp: the messages handed over and those that failed again."""

    number: int
    size: int
    handed: int = 0
    failed: int = 0


class _Run:
    """One claimed redrive's run in this process."""

    def __init__(
        self,
        redrive: Redrive,
        stop: Stop,
        on_progress: OnProgress | None,
        deadline: float | None,
        halted: Callable[[], bool] | None,
    ) -> None:
        self.redrive = redrive
        self.stop = stop
        self.on_progress = on_progress
        self.deadline = deadline
        self.halted = halted
        self.releases = deadline is not None or halted is not None
        self.me = redrive.runner
        self.filter = Filter(redrive.queue)
        self.walk = _Walk(self, skip_waiting=not redrive.destination and not redrive.ignore_backoff)
        self.step = _Step(0, 0)
        self.lost = False

    # -- the run

    def go(self) -> Redrive:
        watcher = _Watcher(self)
        watcher.start()
        try:
            status, reason = self._walk()
        except BaseException as exc:  # DrainAborted (a second signal), KeyboardInterrupt
            status = Redrive.Status.PLANNED if self.releases else Redrive.Status.STOPPED
            with contextlib.suppress(DatabaseError):
                self._end(status, "" if self.releases else f"aborted: {type(exc).__name__} {exc}")
            raise
        finally:
            watcher.finish()
        self._end(status, reason)
        redrive = Redrive.objects.using(conf.DATABASE).get(pk=self.redrive.pk)
        logger.info(
            "redrive ended id=%s status=%s delivered=%s failed=%s dropped=%s moved=%s "
            "remaining=%s reason=%s",
            redrive.pk,
            redrive.status,
            redrive.delivered,
            redrive.failed,
            redrive.dropped,
            redrive.moved,
            redrive.remaining,
            redrive.reason or "-",
        )
        return redrive

    def _walk(self) -> tuple[str, str]:
        """Run until the walk ends or a stop; the status and reason to end with."""
        redrive = self.redrive
        try:
            self.filter = redrive_filter(
                redrive.queue, redrive.search, redrive.after, redrive.before
            )
            with self._queue_lock():
                if redrive.destination:
                    self._move_all(redrive.destination)
                else:
                    stopped = self._deliver_all()
                    if stopped is not None:
                        return Redrive.Status.STOPPED, stopped
        except (DrainConfigError, RedriveError, queue.QueueingError) as exc:
            return Redrive.Status.FAILED, str(exc)
        except DatabaseError as exc:
            logger.exception("redrive failed id=%s", redrive.pk)
            reconnect.close_if_lost(sql.connection())
            return Redrive.Status.FAILED, f"database error: {reconnect.first_line(exc)}"
        if self.walk.exhausted:
            return Redrive.Status.FINISHED, self._skipped_note()
        reason = self.stop.reason or "stop"
        if reason == RELEASE:
            return Redrive.Status.PLANNED, ""
        return Redrive.Status.STOPPED, f"stopped by {reason}; --resume {redrive.pk} carries on"

    def _queue_lock(self) -> contextlib.AbstractContextManager[object]:
        """SQLite's one drain a queue at a time (a drain reads rows with no lock, so a
        row moved or handed over under it would be handed over twice); waits for
        a running drain's pass to end."""
        db_file = None if claims.can_claim_rows() else claims.sqlite_file()
        if db_file is None:
            return contextlib.nullcontext()
        return QueueLock(db_file, [self.redrive.queue], wait=True, stop=self.stop)

    def _deliver_all(self) -> str | None:
        """Hand the matching messages over step by step; the stop-after reason if a
        step failed too often."""
        redrive = self.redrive
        handlers = load_handlers([redrive.queue])
        delivery = Delivery(
            handlers=handlers,
            report=DrainReport(queues=[redrive.queue]),
            stop=self.stop,
            limit=TimeLimit(configured_handler_timeout(), None),
            pace=None if redrive.rate is None else Pace(redrive.rate, 1, self.stop),
            concurrency=redrive.concurrency,
            on_outcome=self._settled,
            on_drop=self._dropped,
            breakers=False,
            autocommit_between=True,  # each message's counts and cursor commit after it
        )
        take = self.walk.source(delivery)
        for number, size in enumerate(_step_sizes(redrive.ramp), start=1):
            self.step = _Step(number, size)
            delivery.budget = Budget(size, Guard())
            delivery.hand_over(take)
            self.save()
            if self._failed_too_often():
                step = self.step
                return (
                    f"stop-after: {step.failed} of {step.handed} message(s) of step {number} "
                    f"failed again (more than {redrive.stop_after:g} %)"
                )
            if self.walk.exhausted or self.stopping():
                return None
        return None  # pragma: no cover - the steps never end

    def _failed_too_often(self) -> bool:
        limit = self.redrive.stop_after
        step = self.step
        return limit is not None and step.handed > 0 and step.failed * 100 > limit * step.handed

    def _move_all(self, destination: str) -> None:
        redrive = self.redrive
        pace = None if redrive.rate is None else Pace(redrive.rate, 1, self.stop)
        while not self.stopping():
            key = self.walk.next_key()
            if key is None:
                return
            if pace is not None:
                pace()
                if self.stopping():
                    return
            try:
                if moves.move_msg(key, destination) is not None:
                    redrive.moved += 1
            except moves.MoveConflict:
                self.walk.conflicts += 1
            self.walk.done(key)
            self.save()

    def stopping(self) -> bool:
        """Whether to end after the message in hand: a stop, a spent deadline, `halted`."""
        if self.stop.is_set():
            return True
        spent = self.deadline is not None and time.monotonic() >= self.deadline
        if spent or (self.halted is not None and self.halted()):
            self.stop(RELEASE)
        return self.stop.is_set()

    # -- what the loop tells

    def _settled(self, key: bytes, outcome: Outcome) -> None:
        redrive = self.redrive
        if outcome in _DELIVERED:
            redrive.delivered += 1
        elif outcome in _DROPPED:
            redrive.dropped += 1
        else:
            redrive.failed += 1
        self.step.handed += 1
        self.step.failed += outcome in FAILED_AGAIN
        self.walk.done(key)
        self.save()
        self.stopping()  # a spent deadline ends the loop after this message

    def _dropped(self, outcome: Outcome) -> None:
        """A row the queue's rules dropped on the way (expired, corrupt)."""
        self.redrive.dropped += 1

    # -- the row

    def save(self) -> None:
        """Write the counts, the cursor and the heartbeat, if the row is still this
        runner's (else stop: another runner took it over)."""
        redrive = self.redrive
        redrive.remaining = max(0, redrive.matched - self.walk.walked)
        redrive.cursor = self.walk.cursor
        redrive.heartbeat_at = datetime.now(UTC)
        written = (
            Redrive.objects.using(conf.DATABASE)
            .filter(pk=redrive.pk, runner=self.me)
            .update(
                cursor=redrive.cursor,
                delivered=redrive.delivered,
                failed=redrive.failed,
                dropped=redrive.dropped,
                moved=redrive.moved,
                remaining=redrive.remaining,
                heartbeat_at=redrive.heartbeat_at,
            )
        )
        if not written:
            self.lost = True
            self.stop("taken over")
        elif self.on_progress is not None:
            self.on_progress(redrive)

    def _end(self, status: str, reason: str) -> None:
        """The run's last write: counts, status and reason (a cancel, or another
        runner's takeover, is left as it is)."""
        self.save()
        if self.lost:
            return
        rows = Redrive.objects.using(conf.DATABASE).filter(
            pk=self.redrive.pk, runner=self.me, status=Redrive.Status.RUNNING
        )
        released = status == Redrive.Status.PLANNED
        rows.update(
            status=status,
            reason=reason,
            runner="" if released else self.me,
            heartbeat_at=None if released else datetime.now(UTC),
            finished_at=None if released else datetime.now(UTC),
        )

    def _skipped_note(self) -> str:
        redrive = self.redrive
        handled = redrive.delivered + redrive.failed + redrive.dropped + redrive.moved
        skipped = max(0, self.walk.walked - handled)
        notes = []
        if self.walk.waiting:
            notes.append(f"{self.walk.waiting} waiting on a backoff (left to the drain)")
        if self.walk.conflicts:
            notes.append(f"{self.walk.conflicts} not moved: the key is taken in the destination")
        other = skipped - self.walk.waiting - self.walk.conflicts
        if other > 0:
            notes.append(f"{other} gone or held by another drain")
        return "skipped " + ", ".join(notes) if notes else ""


def _step_sizes(ramp: Sequence[int]) -> Iterator[int]:
    """The ramp's step sizes, then its last size (or `DEFAULT_STEP`) again and again."""
    yield from ramp
    yield from itertools.repeat(ramp[-1] if ramp else DEFAULT_STEP)


class _Walk:
    """The keys a run walks, from the row's cursor on, in batches. `cursor` is the
    last key up to which every key is done (settled, or passed over): with several
    messages in hand their outcomes may come out of order, and a key still in hand
    holds the cursor back. `walked` counts the keys done."""

    def __init__(self, run: _Run, *, skip_waiting: bool) -> None:
        redrive = run.redrive
        self.run = run
        self.until = None if redrive.until is None else bytes(redrive.until)
        self.cursor = None if redrive.cursor is None else bytes(redrive.cursor)
        self.walked = redrive.matched - redrive.remaining
        self.exhausted = redrive.until is None
        self.waiting = 0
        self.conflicts = 0
        self._skip_waiting = skip_waiting
        self._read_to = self.cursor
        self._batch: collections.deque[bytes] = collections.deque()
        self._held: set[bytes] = set()
        self._open: collections.deque[bytes] = collections.deque()
        self._settled: set[bytes] = set()
        self._lock = threading.Lock()

    def next_key(self) -> bytes | None:
        """The next key to take, in key order (None at the end of the walk); one a
        backoff holds is done at once, left to the drain."""
        with self._lock:
            while True:
                while not self._batch and not self.exhausted:
                    self._fill()
                if not self._batch:
                    return None
                key = self._batch.popleft()
                self._open.append(key)
                if key not in self._held:
                    return key
                self.waiting += 1
                self._done(key)

    def done(self, key: bytes) -> None:
        """`key` is settled or passed over."""
        with self._lock:
            self._done(key)

    def _done(self, key: bytes) -> None:
        self.walked += 1
        self._settled.add(key)
        while self._open and self._open[0] in self._settled:
            self.cursor = self._open.popleft()
            self._settled.discard(self.cursor)

    def _fill(self) -> None:
        assert self.until is not None
        found = self.run.filter.keys(after=self._read_to, until=self.until, limit=WALK_BATCH)
        if not found:
            self.exhausted = True
            return
        self._read_to = found[-1]
        self._held = _waiting(found) if self._skip_waiting else set()
        self._batch.extend(found)

    def source(self, delivery: Delivery) -> Callable[[], queue.Queued | Skip | None]:
        """The loop's source: the next key's message (`claims.fetch_msg`, locked on a
        server), `SKIPPED` for a row that is gone or held, None at the end."""

        def take() -> queue.Queued | Skip | None:
            key = self.next_key()
            if key is None:
                return None
            item = claims.fetch_msg(key, on_drop=delivery.dropped)
            if item is None:
                self.done(key)
                return SKIPPED
            return item

        return take


def _waiting(found: list[bytes]) -> set[bytes]:
    """Those of `found` a backoff holds back now (due later): the drain's rule."""
    now = datetime.now(UTC)
    rows = QueuedMessage.objects.using(conf.DATABASE).filter(key__in=found, due_at__gt=now)
    return {bytes(k) for k in rows.values_list("key", flat=True)}


class _Watcher(threading.Thread):
    """Re-reads the run's row every `CHECK_EVERY` seconds on a connection of its own:
    a cancel, or another runner, stops the run after the message in hand; writes
    the heartbeat every `HEARTBEAT_EVERY` seconds meanwhile (a slow handler)."""

    def __init__(self, run: _Run) -> None:
        super().__init__(name=f"deadletter-redrive-{run.redrive.pk}", daemon=True)
        self.job = run
        self._done = threading.Event()

    def run(self) -> None:
        try:
            self._watch()
        finally:
            connections[conf.DATABASE].close()

    def _watch(self) -> None:
        run = self.job
        rows = Redrive.objects.using(conf.DATABASE)
        beat_at = time.monotonic() + HEARTBEAT_EVERY
        while not self._done.wait(CHECK_EVERY):
            try:
                row = rows.filter(pk=run.redrive.pk).values_list("status", "runner").first()
                if row is None or row[0] == Redrive.Status.CANCELLED:
                    run.stop("cancelled")
                elif row[1] != run.me:
                    run.lost = True
                    run.stop("taken over")
                elif time.monotonic() >= beat_at:
                    beat_at = time.monotonic() + HEARTBEAT_EVERY
                    rows.filter(pk=run.redrive.pk, runner=run.me).update(
                        heartbeat_at=datetime.now(UTC)
                    )
                run.stopping()
            except DatabaseError:
                logger.warning("redrive watcher cannot read its row id=%s", run.redrive.pk)
                reconnect.close_if_lost(connections[conf.DATABASE])

    def finish(self) -> None:
        self._done.set()
        self.join()
