"""The queue table's non-hot reads and writes, as a queryset: a queue's tail, its
row count, a claimed row, rows inserted unless present.

Attached to `QueuedMessage` as its manager (`models.py`), so these statements
are plain ORM and every Django instrument sees them. The hot paths (store,
dequeue, a scan's pages) stay raw SQL in `sql.py`: measured in `bench/`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from django.db import models, transaction

from deadletter import keys

if TYPE_CHECKING:
    from deadletter.models import QueuedMessage  # noqa: F401  (the queryset's model, by name)

__all__ = ["QueuedMessageQuerySet"]


class QueuedMessageQuerySet(models.QuerySet["QueuedMessage"]):
    def of_queue(self, queue: str) -> QueuedMessageQuerySet:
        """The rows of `queue`: its key range `[name, name 0x01)`, a legacy row first."""
        low, high = keys.queue_bounds(queue)
        return self.filter(key__gte=low, key__lt=high)

    def tail_key(self, queue: str) -> bytes | None:
        """The newest key of `queue` (one index lookup)."""
        key = self.of_queue(queue).order_by("-key").values_list("key", flat=True).first()
        return None if key is None else bytes(key)

    def count_rows(self, queue: str, until: bytes | None = None) -> int:
        """Rows of `queue` up to and including `until`."""
        rows = self.of_queue(queue)
        return (rows if until is None else rows.filter(key__lte=until)).count()

    def claim(
        self, queue: str, *, after: bytes | None, inclusive: bool, until: bytes | None
    ) -> tuple[bytes, bytes] | None:
        """Lock the oldest row of `queue` from `after` on (up to `until`) that no other
        transaction holds (`FOR UPDATE SKIP LOCKED`); `(key, value)` or None."""
        rows = self.of_queue(queue)
        if after is not None:
            rows = rows.filter(key__gte=after) if inclusive else rows.filter(key__gt=after)
        if until is not None:
            rows = rows.filter(key__lte=until)
        return _row(
            rows.select_for_update(skip_locked=True)
            .order_by("key")
            .values_list("key", "value")
            .first()
        )

    def locked_row(self, key: bytes, *, lock: bool) -> tuple[bytes, bytes] | None:
        """`(key, value)` of the row `key`, locked `FOR UPDATE SKIP LOCKED` when `lock`."""
        rows = self.filter(key=key)
        if lock:
            rows = rows.select_for_update(skip_locked=True)
        return _row(rows.values_list("key", "value").first())

    def insert_missing(self, rows: Iterable[tuple[bytes, bytes]]) -> None:
        """Insert `(key, value)` rows in one short transaction, leaving a key already
        present as it is; the instances are built before the write lock is taken."""
        objs = [self.model(key=key, value=value) for key, value in rows]
        with transaction.atomic(using=self.db):
            self.bulk_create(objs, ignore_conflicts=True)


def _row(row: Any) -> tuple[bytes, bytes] | None:
    if row is None:
        return None
    return bytes(row[0]), bytes(row[1]) if row[1] is not None else b""
