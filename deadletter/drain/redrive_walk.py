"""The keys a redrive's run walks (`Walk`): its filter's matches from the row's
cursor up to `until`, read in batches, and the cursor that only moves past a key
once every key before it is done.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from datetime import UTC, datetime

from deadletter import queue
from deadletter.conf import conf
from deadletter.drain.delivery import SKIPPED, Delivery, Skip
from deadletter.drain.redrive_match import Filter
from deadletter.models import QueuedMessage, Redrive
from deadletter.queue import claims

__all__ = ["WALK_BATCH", "Walk"]

WALK_BATCH = 100


class Walk:
    """The keys a run walks, from the row's cursor on, in batches. `cursor` is the
    last key up to which every key is done (settled, or passed over): with several
    messages in hand their outcomes may come out of order, and a key still in hand
    holds the cursor back. `walked` counts the keys done."""

    def __init__(self, redrive: Redrive, *, skip_waiting: bool) -> None:
        self.filter = Filter(redrive.queue)
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
        found = self.filter.keys(after=self._read_to, until=self.until, limit=WALK_BATCH)
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
