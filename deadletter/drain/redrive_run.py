"""Running a stored redrive (`run_redrive`) once this process has claimed it
(`redrive_claim`).

It walks the keys its filter matches from `cursor` up to `until`
(`redrive_walk`); without a destination each message goes through the one
delivery loop (`Delivery.hand_over`) under the drain's outcome rules, with a
destination each row is moved (`queue.moves`). After each message the counts and
the cursor, the last key settled, are written to the row. Each key taken is
marked first (`RedriveMark`, with its settlement on a server), so a run that
starts after a kill counts what the killed one settled and did not count, and
hands over again only a message that was never settled. A finished redrive's
`remaining` is what it did not hand over, and its reason says why, each.
Carrying on unfinished redrives is `redrive_turns`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime

from django.db import DatabaseError, transaction

from deadletter import queue
from deadletter.conf import conf
from deadletter.drain.delivery import Delivery, Pace, Stop
from deadletter.drain.errors import DrainConfigError
from deadletter.drain.handlers import load_handlers
from deadletter.drain.locking import QueueLock
from deadletter.drain.redrive_claim import Watcher, claim_redrive
from deadletter.drain.redrive_walk import Walk, actor_of, reconcile
from deadletter.drain.redrives import RedriveError, redrive_filter
from deadletter.drain.report import DrainReport, Outcome
from deadletter.drain.timeouts import TimeLimit, configured_handler_timeout
from deadletter.drain.workers import Budget, Guard
from deadletter.models import QueuedMessage, Redrive
from deadletter.models.redrives import RedriveMark
from deadletter.queue import claims, moves
from deadletter.store import reconnect, sql

__all__ = ["DEFAULT_STEP", "FAILED_AGAIN", "RELEASE", "OnProgress", "run_redrive"]

logger = logging.getLogger("deadletter")

DEFAULT_STEP = 100
"""A step's size, for `stop_after`, when no ramp is given."""
RELEASE = "release"
"""The stop reason that hands the redrive back as planned (the service's turn ended,
or the service is stopping): any runner carries on from its cursor."""

FAILED_AGAIN = (Outcome.FAILED, Outcome.HELD, Outcome.MAX_ATTEMPTS, Outcome.PERMANENT)
_DELIVERED = (Outcome.DELIVERED, Outcome.REQUEUED)
_DROPPED = (Outcome.PERMANENT, Outcome.MAX_ATTEMPTS, Outcome.EXPIRED, Outcome.CORRUPT)

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
        redrive.remaining = max(0, redrive.matched - _handled(redrive))
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
        """Count what a killed run settled and did not count (`redrive_walk.reconcile`):
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
        rest = redrive.matched - _handled(redrive) - passed
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
        left = redrive.matched - _handled(redrive)
        return f"{left} not {verb}: " + ", ".join(notes)


def _handled(redrive: Redrive) -> int:
    """The messages a redrive handed over (or moved)."""
    return redrive.delivered + redrive.failed + redrive.dropped + redrive.moved


def _row_exists(key: bytes) -> bool:
    return QueuedMessage.objects.using(conf.DATABASE).filter(key=key).exists()


def _step_sizes(ramp: Sequence[int]) -> Iterator[int]:
    """The ramp's step sizes, then its last size (or `DEFAULT_STEP`) again and again."""
    yield from ramp
    yield from itertools.repeat(ramp[-1] if ramp else DEFAULT_STEP)
