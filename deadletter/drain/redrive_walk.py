"""The keys a redrive's run walks (`Walk`): its filter's matches from the row's
cursor up to `until`, read in batches, the cursor that only moves past a key once
every key before it is done, and the marks (`RedriveMark`) that keep its counts
exact through a kill.

A key is marked when it is taken: on a server in the claim transaction, so the mark
commits with the message's settlement or not at all; on SQLite just before its
handler. The counts and the cursor are written with the marks they cover deleted
(`write_marks`, in the same transaction), and a key done past the cursor (several in
hand) is marked counted. So a run that starts after a kill finds each key it took
and did not count still marked, and reads what became of it (`reconcile`): its row
and the attempts the redrive wrote say whether it was delivered, failed, dropped,
or never settled (handed over again then).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from django.db.models import QuerySet

from deadletter import queue
from deadletter.conf import conf
from deadletter.drain.delivery import SKIPPED, Delivery, Skip
from deadletter.drain.redrive_match import Filter
from deadletter.models import (
    ArchivedMessage,
    Attempt,
    QueuedMessage,
    QueuedMessageQuerySet,
    Redrive,
)
from deadletter.models.redrives import RedriveMark
from deadletter.queue import claims
from deadletter.queue.history import AttemptOutcome
from deadletter.queue.rows import DropReason

__all__ = ["WALK_BATCH", "Walk", "actor_of", "reconcile"]

WALK_BATCH = 100

_DROPPING = (AttemptOutcome.PERMANENT, AttemptOutcome.MAX_ATTEMPTS)
_DROP_REASONS = tuple(str(reason) for reason in DropReason)


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
