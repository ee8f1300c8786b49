"""Bulk work from the admin, bounded: keys are read a chunk at a time by key
(never every selected key in one list), each row (a delete: each chunk) is
settled in its own short transaction (never one over the whole set), and a request stops after
`DEADLETTER_ADMIN_TIME_BUDGET` seconds, saying what is left; a retry's handler
still running then is given up on (`drain.redeliver`'s deadline).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from django.db import DatabaseError
from django.db.models import QuerySet

from deadletter import drain
from deadletter.conf import conf
from deadletter.models import QueuedMessage
from deadletter.queue import archive
from deadletter.wire import keys

CHUNK = 500
# `Progress.stopped_by` when a chunk failed in the database (nothing of it changed).
DATABASE_FAILED = "database failed"
LEFT_CAP = 100_000

logger = logging.getLogger("deadletter")


@dataclasses.dataclass
class Progress:
    """How far a bounded bulk run got: `left` counts what it did not reach (capped)."""

    done: int = 0
    left: int = 0
    left_capped: bool = False
    report: drain.DrainReport | None = None
    stopped_by: str | None = None

    @property
    def left_text(self) -> str:
        return f"{self.left:,}{'+' if self.left_capped else ''}"


@dataclasses.dataclass(frozen=True, slots=True)
class Matching:
    """How many rows a selection holds, counted up to `LEFT_CAP` (a bounded read
    of the key index however large the queue): exact unless `capped`."""

    rows: int
    capped: bool

    def __str__(self) -> str:
        return f"at least {self.rows:,}" if self.capped else f"{self.rows:,}"


def matching(queryset: QuerySet[QueuedMessage]) -> Matching:
    """The selection's rows, counted up to `LEFT_CAP`: what "delete all matching"
    says it deletes, and what a bounded run says it left."""
    found = queryset.order_by().values_list("key", flat=True)[: LEFT_CAP + 1].count()
    return Matching(min(found, LEFT_CAP), found > LEFT_CAP)


SAMPLE = 20


@dataclasses.dataclass(frozen=True, slots=True)
class Confirmation:
    """What a bulk action's confirmation page says it will act on, every figure read
    off the selection as the user's rules leave it: the rows posted (`chosen`) or,
    for "all matching", `matching`; the first `SAMPLE` rows; their queues."""

    select_across: bool
    chosen: int
    matching: Matching | None
    sample: list[Any]
    queues: list[str]

    @property
    def more(self) -> int:
        """How many chosen rows the sample leaves out (never below 0)."""
        return max(0, self.chosen - len(self.sample))

    @property
    def empty(self) -> bool:
        return not self.sample


def confirmation(queryset: QuerySet[QueuedMessage], *, select_across: bool) -> Confirmation:
    """The figures of a confirmation page for `queryset` (already kept to the user's
    queues): posted rows are few (a page's), so they are read whole; "all matching"
    is counted up to `LEFT_CAP`."""
    sample = list(queryset.order_by("key")[:SAMPLE])
    if select_across:
        found = matching(queryset)
        return Confirmation(True, found.rows, found, sample, [])
    chosen = [bytes(k) for k in queryset.order_by("key").values_list("key", flat=True)]
    queues = sorted({keys.queue_of(k) for k in chosen})
    return Confirmation(False, len(chosen), None, sample, queues)


def key_chunks(queryset: QuerySet[QueuedMessage], size: int = CHUNK) -> Iterator[list[bytes]]:
    """The selected keys in key order, `size` at a time, each chunk its own query."""
    ordered = queryset.order_by("key").values_list("key", flat=True)
    last: bytes | None = None
    while True:
        page = ordered.filter(key__gt=last) if last is not None else ordered
        chunk = [bytes(k) for k in page[:size]]
        if chunk:
            yield chunk
        if len(chunk) < size:
            return
        last = chunk[-1]


Work = Callable[[list[bytes], float], tuple[int, int]]


def run_bounded(
    queryset: QuerySet[QueuedMessage], work: Work, *, budget: float | None = None
) -> Progress:
    """Apply `work` to the selected keys chunk by chunk until done or out of time.

    `work(chunk, deadline)` answers (rows done, rows of the chunk it did not
    reach before `deadline`); a chunk cut short ends the run.
    """
    budget = conf.ADMIN_TIME_BUDGET if budget is None else budget
    deadline = time.monotonic() + budget
    progress = Progress()
    last: bytes | None = None
    unreached = 0
    for chunk in key_chunks(queryset):
        if time.monotonic() >= deadline:
            break
        done, unreached = work(chunk, deadline)
        progress.done += done
        last = chunk[-1]
        if unreached:
            break
    else:
        return progress
    rest = matching(queryset.filter(key__gt=last) if last is not None else queryset)
    left = unreached + rest.rows
    progress.left, progress.left_capped = min(left, LEFT_CAP), rest.capped or left > LEFT_CAP
    return progress


def delete(
    queryset: QuerySet[QueuedMessage], log: Callable[[list[bytes]], None], *, actor: str
) -> Progress:
    """An operator's delete of every selected row: each chunk archived and deleted
    in one transaction (`archive.discard_many`, by `actor`; dequeued as before
    where the queue's archive is off), signals as a drain's, `log` per chunk."""

    failed = False

    def work(chunk: list[bytes], deadline: float) -> tuple[int, int]:
        nonlocal failed
        log(chunk)
        try:
            return archive.discard_many(chunk, actor=actor), 0
        except DatabaseError:
            logger.exception("bulk delete failed chunk=%d actor=%s", len(chunk), actor)
            failed = True
            return 0, len(chunk)

    progress = run_bounded(queryset, work)
    progress.stopped_by = DATABASE_FAILED if failed else None
    return progress


def retry(
    queryset: QuerySet[QueuedMessage],
    on_outcome: Callable[[bytes, drain.Outcome], None] | None = None,
    *,
    actor: str = "retry",
) -> Progress:
    """Hand the selected rows to their handlers (`drain.redeliver`) chunk by chunk;
    `on_outcome` hears of each row handed over; `actor` is who failed attempts are
    recorded as (`retry:<user name>`).

    Raises `drain.DrainConfigError` / `drain.DrainLocked` from the first chunk.
    """
    total: list[drain.DrainReport] = []

    def work(chunk: list[bytes], deadline: float) -> tuple[int, int]:
        report = drain.redeliver(chunk, deadline=deadline, on_outcome=on_outcome, actor=actor)
        total.append(report)
        return report.handled, report.unreached

    progress = run_bounded(queryset, work)
    if total:
        merged = total[0]
        for report in total[1:]:
            merged.merge(report.as_dict())
        progress.report = merged
        progress.stopped_by = total[-1].stopped_by
    return progress
