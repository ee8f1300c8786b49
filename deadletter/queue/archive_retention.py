"""The archive's retention and counts: entries older than their queue's
`archive_for` are purged in bounded batches (the drain service between passes,
`deadletter_purge`), with the attempt history of keys nothing holds any more;
`archived_counts` says how many entries each queue has.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.db.models import Count

from deadletter.conf import conf
from deadletter.models import ArchivedMessage, Attempt, QueuedMessage
from deadletter.queue import limits

__all__ = ["PurgePlan", "archived_counts", "archived_queues", "due_for_purge", "purge"]

logger = logging.getLogger("deadletter")

PurgePlan = dict[str, int]
"""Queue -> entries older than its `archive_for` (what a purge would remove)."""


def _entries() -> Any:
    return ArchivedMessage.objects.using(conf.DATABASE)


def archived_queues() -> Iterator[str]:
    """The name of every queue with an archive entry, in name order: one index
    seek a queue (the (queue, archived_at, id) index), never a scan of the entries."""
    entries = _entries().order_by("queue").values_list("queue", flat=True)
    name = entries.first()
    while name is not None:
        yield name
        name = entries.filter(queue__gt=name).first()


def archived_counts(queues: Sequence[str] | None = None) -> dict[str, int]:
    """Queue -> archive entries: of `queues` (each present, 0 when none), else of
    every queue with one. One statement, counted on the queue's index."""
    entries = _entries()
    result: dict[str, int] = {}
    if queues is not None:
        if not queues:
            return {}
        entries = entries.filter(queue__in=list(queues))
        result = dict.fromkeys(queues, 0)
    for name, n in entries.order_by().values_list("queue").annotate(n=Count("id")):
        result[name] = int(n)
    return result


def _cutoff(queue: str, now: datetime) -> datetime | None:
    """The instant before which `queue`'s entries are purged; None: kept for ever.
    A queue whose archive is off keeps nothing (entries made before it was turned off go)."""
    retention = limits.archive_for(queue)
    return None if retention is None else now - retention


def due_for_purge(queue: str | None = None) -> PurgePlan:
    """What a purge would remove now, by queue (of `queue`, or every queue with
    entries); queues with nothing to purge left out."""
    now = datetime.now(UTC)
    plan: PurgePlan = {}
    for name in [queue] if queue is not None else archived_queues():
        cutoff = _cutoff(name, now)
        if cutoff is None:
            continue
        n = _entries().filter(queue=name, archived_at__lt=cutoff).count()
        if n:
            plan[name] = n
    return plan


def purge(*, deadline: float | None = None, batch: int = 500, queue: str | None = None) -> int:
    """Remove the entries older than their queue's `archive_for` (of `queue`, or
    of every queue), `batch` at a time, each batch a transaction with the attempt
    history of its keys that no live row and no other entry holds; stops before a
    batch once `deadline` (`time.monotonic()`) has passed. How many went."""
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    now = datetime.now(UTC)
    total = 0
    for name in [queue] if queue is not None else list(archived_queues()):
        cutoff = _cutoff(name, now)
        if cutoff is None:
            continue
        old = _entries().filter(queue=name, archived_at__lt=cutoff).order_by("archived_at", "id")
        while deadline is None or time.monotonic() < deadline:
            with transaction.atomic(using=conf.DATABASE):
                rows = list(old.values_list("id", "key")[:batch])
                if rows:
                    _entries().filter(id__in=[i for i, _ in rows]).delete()
                    _forget_attempts({bytes(k) for _, k in rows})
            total += len(rows)
            if len(rows) < batch:
                break
        else:
            break
    if total:
        logger.info("purged archive entries count=%d", total)
    return total


def _forget_attempts(purged: set[bytes]) -> None:
    """Delete the attempt rows of `purged` keys that neither a live row nor another
    archive entry holds (their history goes with the last of them)."""
    held = set(
        QueuedMessage.objects.using(conf.DATABASE)
        .filter(key__in=purged)
        .values_list("key", flat=True)
    ) | set(_entries().filter(key__in=purged).values_list("key", flat=True))
    gone = purged - {bytes(k) for k in held}
    if gone:
        Attempt.objects.using(conf.DATABASE).filter(key__in=gone).delete()
