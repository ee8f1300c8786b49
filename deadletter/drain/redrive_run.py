"""Running a stored redrive in this process (`run_redrive`): who runs it, what it
walks, and the run itself.

Who: a run claims its row (planned -> running, `runner` "host:pid", a heartbeat) by
one conditional UPDATE (`claim_redrive`), so two processes never run one redrive.
A watcher thread (`Watcher`) re-reads the row every second (a cancel stops the run
after the message in hand; a runner that is no longer this process stops too) and
writes the heartbeat. A running redrive whose heartbeat is older than
`STALE_AFTER`, or whose runner was a process of this host that is gone, is stale
(`is_stale`): another run may take it over.

What: the keys its filter matches (`redrives.Filter`) from the row's `cursor` up
to `until`, read in batches (`Walk`); the cursor only moves past a key once every
key before it is done. A key is marked (`RedriveMark`) when it is taken: on a
server in the claim transaction, so the mark commits with the message's settlement
or not at all; on SQLite just before its handler. The counts and the cursor are
written with the marks they cover deleted, in the same transaction, and a key done
past the cursor (several in hand) is marked counted. So a run that starts after a
kill finds each key it took and did not count still marked, and reads what became
of it (`reconcile`): delivered, failed, dropped, or never settled (handed over
again then).

The run: without a destination each message goes through the one delivery loop
(`Delivery.hand_over`) under the drain's outcome rules, step by step (the ramp,
judged by stop-after); with a destination each row is moved (`queue.moves`). After
each message the counts and the cursor are written to the row. A finished
redrive's `remaining` is what it did not hand over, and its reason says why, each.
Carrying on unfinished redrives is `redrive_turns`.

One module: the claim, the walk's marks and the run's counts are one bookkeeping,
kept exact through a kill only together, so they read best side by side.
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
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta

from django.db import DatabaseError, connections, transaction
from django.db.models import QuerySet

from deadletter import queue
from deadletter.conf import conf
from deadletter.drain.delivery import SKIPPED, Delivery, Pace, Skip, Stop
from deadletter.drain.errors import DrainConfigError
from deadletter.drain.handlers import load_handlers
from deadletter.drain.locking import QueueLock
from deadletter.drain.redrives import Filter, RedriveError, handled, redrive_filter
from deadletter.drain.report import DrainReport, Outcome
from deadletter.drain.timeouts import TimeLimit, configured_handler_timeout
from deadletter.drain.workers import Budget, Guard
from deadletter.models import (
    ArchivedMessage,
    Attempt,
    QueuedMessage,
    QueuedMessageQuerySet,
    Redrive,
)
from deadletter.models.redrives import RedriveMark
from deadletter.queue import claims, moves
from deadletter.queue.history import AttemptOutcome
from deadletter.queue.rows import DropReason
from deadletter.store import reconnect, sql

__all__ = [
    "CHECK_EVERY",
    "DEFAULT_STEP",
    "FAILED_AGAIN",
    "HEARTBEAT_EVERY",
    "RELEASE",
    "STALE_AFTER",
    "WALK_BATCH",
    "OnProgress",
    "Walk",
    "Watcher",
    "actor_of",
    "claim_redrive",
    "is_stale",
    "reconcile",
    "run_redrive",
    "runner_name",
]

logger = logging.getLogger("deadletter")

DEFAULT_STEP = 100
"""A step's size, for `stop_after`, when no ramp is given."""
RELEASE = "release"
"""The stop reason that hands the redrive back as planned (the service's turn ended,
or the service is stopping): any runner carries on from its cursor."""
STALE_AFTER = 30.0
"""Seconds without a heartbeat after which a running redrive's runner counts as gone."""
HEARTBEAT_EVERY = 5.0
CHECK_EVERY = 1.0
"""How often a run re-reads its row for a cancel."""
WALK_BATCH = 100

FAILED_AGAIN = (Outcome.FAILED, Outcome.HELD, Outcome.MAX_ATTEMPTS, Outcome.PERMANENT)
_DELIVERED = (Outcome.DELIVERED, Outcome.REQUEUED)
_DROPPED = (Outcome.PERMANENT, Outcome.MAX_ATTEMPTS, Outcome.EXPIRED, Outcome.CORRUPT)
_DROPPING = (AttemptOutcome.PERMANENT, AttemptOutcome.MAX_ATTEMPTS)
_DROP_REASONS = tuple(str(reason) for reason in DropReason)

OnProgress = Callable[[Redrive], None]


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
    redrive = claim_redrive(redrive_id, resume=resume)
    run = _Run(redrive, stop or Stop(), on_progress, deadline, halted)
    return run.go()


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
        self.walk = Walk(
            redrive, skip_waiting=not redrive.destination and not redrive.ignore_backoff
        )
        self.step = _Step(0, 0)
        self.lost = False

    # -- the run

    def go(self) -> Redrive:
        watcher = Watcher(self)
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
            self.walk.filter = redrive_filter(
                redrive.queue, redrive.search, redrive.after, redrive.before, reveal=redrive.reveal
            )
            with self._queue_lock():
                self._reconcile()
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
            self._count_the_rest()
            return Redrive.Status.FINISHED, self._left_note()
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
            actor=actor_of(redrive),
        )
        take = self.walk.source(delivery)
        for number, size in enumerate(_step_sizes(redrive.ramp), start=1):
            self.step = _Step(number, size)
            delivery.budget = Budget(size, Guard())
            untaken = delivery.hand_over(take)
            if untaken is not None:
                self.walk.give_back(untaken.key)
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
                with transaction.atomic(using=conf.DATABASE):
                    moved = moves.move_msg(key, destination) is not None
                    if moved:
                        self.walk.mark(key)  # commits with the move
            except moves.MoveConflict:
                self.walk.conflicts += 1
            else:
                if moved:
                    redrive.moved += 1
                elif _row_exists(key):
                    self.walk.held += 1
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
        """Write the counts, the cursor and the heartbeat, with the marks they cover
        (`Walk.write_marks`), in one transaction, if the row is still this runner's
        (else stop: another runner took it over)."""
        redrive = self.redrive
        walk = self.walk
        redrive.held, redrive.waiting, redrive.conflicts = walk.held, walk.waiting, walk.conflicts
        redrive.remaining = max(0, redrive.matched - handled(redrive))
        redrive.cursor = walk.cursor
        redrive.heartbeat_at = datetime.now(UTC)
        with transaction.atomic(using=conf.DATABASE):
            written = (
                Redrive.objects.using(conf.DATABASE)
                .filter(pk=redrive.pk, runner=self.me)
                .update(
                    cursor=redrive.cursor,
                    matched=redrive.matched,
                    delivered=redrive.delivered,
                    failed=redrive.failed,
                    dropped=redrive.dropped,
                    moved=redrive.moved,
                    remaining=redrive.remaining,
                    gone=redrive.gone,
                    held=redrive.held,
                    waiting=redrive.waiting,
                    conflicts=redrive.conflicts,
                    heartbeat_at=redrive.heartbeat_at,
                )
            )
            if written:
                walk.write_marks()
        if not written:
            self.lost = True
            self.stop("taken over")
        elif self.on_progress is not None:
            self.on_progress(redrive)

    def _reconcile(self) -> None:
        """Count what a killed run settled and did not count (`reconcile`):
        each of its marks taken and not counted is counted by what became of its
        message, or dropped, for the message to be handed over again."""
        redrive = self.redrive
        settled, unsettled = [], []
        for mark in self.walk.load_marks():
            became = reconcile(redrive, mark)
            if became is None:
                unsettled.append(bytes(mark.key))
                continue
            settled.append(bytes(mark.key))
            if became in ("delivered", "failed", "dropped", "moved"):
                setattr(redrive, became, getattr(redrive, became) + 1)
        if not settled and not unsettled:
            return
        with transaction.atomic(using=conf.DATABASE):
            self.walk.count_as(settled, settled=True)
            self.walk.count_as(unsettled, settled=False)
            self.save()
        logger.info(
            "redrive counted what a killed run left id=%s settled=%s handed_again=%s",
            redrive.pk,
            len(settled),
            len(unsettled),
        )

    def _count_the_rest(self) -> None:
        """At the end of the walk: the matched messages neither handed over nor passed
        over were gone before the run reached them (a search that found more than
        the plan counted raises `matched` instead)."""
        redrive = self.redrive
        walk = self.walk
        passed = walk.held + walk.waiting + walk.conflicts
        rest = redrive.matched - handled(redrive) - passed
        redrive.gone = max(0, rest)
        redrive.matched -= min(0, rest)

    def _end(self, status: str, reason: str) -> None:
        """The run's last write: counts, status and reason (a cancel, or another
        runner's takeover, is left as it is); a finished one's marks go."""
        self.save()
        if self.lost:
            return
        rows = Redrive.objects.using(conf.DATABASE).filter(
            pk=self.redrive.pk, runner=self.me, status=Redrive.Status.RUNNING
        )
        released = status == Redrive.Status.PLANNED
        with transaction.atomic(using=conf.DATABASE):
            ended = rows.update(
                status=status,
                reason=reason,
                runner="" if released else self.me,
                heartbeat_at=None if released else datetime.now(UTC),
                finished_at=None if released else datetime.now(UTC),
            )
            if ended and status == Redrive.Status.FINISHED:
                RedriveMark.objects.using(conf.DATABASE).filter(redrive_id=self.redrive.pk).delete()

    def _left_note(self) -> str:
        """Why each message a finished redrive did not hand over was left: the reason
        of a finished redrive, "" when it left none."""
        redrive = self.redrive
        notes = []
        if redrive.gone:
            notes.append(
                f"{redrive.gone} gone before the redrive reached them (delivered by a drain, "
                "deleted, edited or moved)"
            )
        if redrive.held:
            notes.append(f"{redrive.held} held by another drain")
        if redrive.waiting:
            notes.append(f"{redrive.waiting} waiting on a backoff (left to the drain)")
        if redrive.conflicts:
            notes.append(f"{redrive.conflicts} not moved: the key is taken in the destination")
        if not notes:
            return ""
        verb = "moved" if redrive.destination else "handed over"
        left = redrive.matched - handled(redrive)
        return f"{left} not {verb}: " + ", ".join(notes)


def _row_exists(key: bytes) -> bool:
    return _rows().filter(key=key).exists()


def _step_sizes(ramp: Sequence[int]) -> Iterator[int]:
    """The ramp's step sizes, then its last size (or `DEFAULT_STEP`) again and again."""
    yield from ramp
    yield from itertools.repeat(ramp[-1] if ramp else DEFAULT_STEP)


# -- who runs it


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


def claim_redrive(redrive_id: int, *, resume: bool) -> Redrive:
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


class Watcher(threading.Thread):
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


# -- what it walks


def actor_of(redrive: Redrive) -> str:
    """Who a redrive's attempts are recorded as (`queue.history`)."""
    return f"redrive:{redrive.pk}"


class Walk:
    """The keys a run walks, from the row's cursor on, in batches. `cursor` is the
    last key up to which every key is done (settled, or passed over): with several
    messages in hand their outcomes may come out of order, and a key still in hand
    holds the cursor back. Keys a run before this one counted past its cursor are
    passed over (`_counted`). `held`, `waiting` and `conflicts` count the keys passed
    over for those reasons, from the row's figures on."""

    def __init__(self, redrive: Redrive, *, skip_waiting: bool) -> None:
        self.redrive_id = redrive.pk
        self.filter = Filter(redrive.queue)
        self.until = None if redrive.until is None else bytes(redrive.until)
        self.cursor = None if redrive.cursor is None else bytes(redrive.cursor)
        self.exhausted = redrive.until is None
        self.held = redrive.held
        self.waiting = redrive.waiting
        self.conflicts = redrive.conflicts
        self._skip_waiting = skip_waiting
        self._read_to = self.cursor
        self._batch: collections.deque[bytes] = collections.deque()
        self._due_later: set[bytes] = set()
        self._open: collections.deque[bytes] = collections.deque()
        self._settled: set[bytes] = set()
        self._marked: set[bytes] = set()
        """Keys marked taken by this run (the mark may not have committed yet)."""
        self._counted: set[bytes] = set()
        """Keys past the cursor whose mark says counted (by this run or one before)."""
        self._lock = threading.Lock()

    # -- the keys

    def next_key(self) -> bytes | None:
        """The next key to take, in key order (None at the end of the walk); one a
        backoff holds is done at once, left to the drain, and one already counted
        is passed over."""
        with self._lock:
            while True:
                while not self._batch and not self.exhausted:
                    self._fill()
                if not self._batch:
                    return None
                key = self._batch.popleft()
                self._open.append(key)
                if key in self._counted:
                    self._done(key)
                elif key in self._due_later:
                    self.waiting += 1
                    self._done(key)
                else:
                    return key

    def done(self, key: bytes) -> None:
        """`key` is settled or passed over."""
        with self._lock:
            self._done(key)

    def give_back(self, key: bytes) -> None:
        """`key` was taken and then not handed over (a stop came between): its mark
        goes, and it stays open, holding the cursor before it, for the next run to
        take it again."""
        with self._lock:
            self._marked.discard(key)
        _marks(self.redrive_id).filter(key=key).delete()

    def _done(self, key: bytes) -> None:
        self._settled.add(key)
        while self._open and self._open[0] in self._settled:
            self.cursor = self._open.popleft()
            self._settled.discard(self.cursor)

    def _fill(self) -> None:
        assert self.until is not None
        found = self.filter.keys(after=self._read_to, until=self.until, limit=WALK_BATCH)
        if not found:
            self.exhausted = True
            return
        self._read_to = found[-1]
        self._due_later = _waiting(found) if self._skip_waiting else set()
        self._batch.extend(found)

    def source(self, delivery: Delivery) -> Callable[[], queue.Queued | Skip | None]:
        """The loop's source: the next key's message (`claims.fetch_msg`, locked on a
        server), marked taken; `SKIPPED` for a row that is gone or held, None at the
        end."""

        def take() -> queue.Queued | Skip | None:
            key = self.next_key()
            if key is None:
                return None
            item = claims.fetch_msg(key, on_drop=delivery.dropped)
            if item is None:
                if _rows().filter(key=key).exists():
                    with self._lock:
                        self.held += 1
                self.done(key)
                return SKIPPED
            self.mark(key)
            return item

        return take

    def mark(self, key: bytes) -> None:
        """Mark `key` taken, in the caller's transaction when there is one."""
        with self._lock:
            self._marked.add(key)
        RedriveMark.objects.using(conf.DATABASE).create(
            redrive_id=self.redrive_id, key=key, taken_at=datetime.now(UTC)
        )

    # -- the marks

    def load_marks(self) -> list[RedriveMark]:
        """The keys runs before this one counted past the cursor (passed over from now
        on), and the marks they took and did not count, for `reconcile`."""
        taken = []
        for mark in _marks(self.redrive_id):
            if mark.counted:
                self._counted.add(bytes(mark.key))
            else:
                taken.append(mark)
        return taken

    def write_marks(self) -> None:
        """With the counts being written (the caller's transaction): delete the marks
        the cursor has passed, mark counted the keys done past it."""
        with self._lock:
            cursor = self.cursor
            passed = {k for k in self._marked | self._counted if cursor is not None and k <= cursor}
            ahead = self._settled - self._counted
            marked_ahead = ahead & self._marked
            self._marked -= passed | ahead
            self._counted = (self._counted | ahead) - passed
        marks = _marks(self.redrive_id)
        if passed:
            marks.filter(key__in=passed).delete()
        if marked_ahead:
            marks.filter(key__in=marked_ahead).update(counted=True)
        if ahead - marked_ahead:
            now = datetime.now(UTC)
            marks.bulk_create(
                [
                    RedriveMark(redrive_id=self.redrive_id, key=k, counted=True, taken_at=now)
                    for k in ahead - marked_ahead
                ],
                ignore_conflicts=True,
            )

    def count_as(self, keys: Iterable[bytes], *, settled: bool) -> None:
        """Marks `reconcile` judged: a settled key is counted (passed over from now
        on), an unsettled one's mark goes, to be taken again."""
        chosen = list(keys)
        if not chosen:
            return
        marks = _marks(self.redrive_id).filter(key__in=chosen)
        if settled:
            marks.update(counted=True)
            with self._lock:
                self._counted.update(chosen)
        else:
            marks.delete()


def reconcile(redrive: Redrive, mark: RedriveMark) -> str | None:
    """What became of the message of a mark a killed run took and did not count:
    "delivered", "failed", "dropped", "moved", "gone" (deleted or edited by someone
    else before it was handed over), or None when it was never settled (its row is
    there and the redrive recorded no attempt: it is handed over again).

    A delivery deletes the row and its history; every other outcome of a hand-over
    writes an attempt by the redrive (`actor_of`) in the transaction of its
    settlement. A drop from a queue whose archive is off keeps no attempt either,
    and counts as delivered."""
    key = bytes(mark.key)
    present = _rows().filter(key=key).exists()
    if redrive.destination:
        return "moved" if not present else None
    tried = list(
        Attempt.objects.using(conf.DATABASE)
        .filter(key=key, actor=actor_of(redrive))
        .exclude(outcome=AttemptOutcome.KILLED)
        .values_list("outcome", flat=True)
    )
    if present:
        return "failed" if tried else None
    if tried:
        return "dropped" if set(tried) & set(_DROPPING) else "failed"
    archived = (
        ArchivedMessage.objects.using(conf.DATABASE)
        .filter(key=key, archived_at__gte=mark.taken_at)
        .values_list("reason", flat=True)
    )
    reasons = set(archived)
    if reasons & set(_DROP_REASONS):
        return "dropped"
    return "gone" if reasons else "delivered"


def _waiting(found: list[bytes]) -> set[bytes]:
    """Those of `found` a backoff holds back now (due later): the drain's rule."""
    now = datetime.now(UTC)
    rows = _rows().filter(key__in=found, due_at__gt=now)
    return {bytes(k) for k in rows.values_list("key", flat=True)}


def _rows() -> QueuedMessageQuerySet:
    return QueuedMessage.objects.using(conf.DATABASE)


def _marks(redrive_id: int) -> QuerySet[RedriveMark]:
    return RedriveMark.objects.using(conf.DATABASE).filter(redrive_id=redrive_id)
