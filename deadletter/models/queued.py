"""The queue table (one row per message, the key holds everything to order and bound
it) with its queryset for the non-hot paths, and the search index of its rows.

The queryset's statements are plain ORM, so every Django instrument sees
them; the hot paths (store, dequeue, a scan's pages) stay raw SQL in `store/sql.py`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import models

from deadletter.models.fields import KEY_BYTES, ExactTextField, HexKeyField, NotNullIndex
from deadletter.wire import keys

# The longest word the search index keeps; a longer one is indexed by its start.
TERM_CHARS = 64


class QueuedMessageQuerySet(models.QuerySet["QueuedMessage"]):
    """A queue's tail, its row count, a row by key (locked when asked)."""

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

    def locked_row(self, key: bytes, *, lock: bool) -> tuple[bytes, bytes] | None:
        """`(key, value)` of the row `key`, locked `FOR UPDATE SKIP LOCKED` when `lock`."""
        rows = self.filter(key=key)
        if lock:
            rows = rows.select_for_update(skip_locked=True)
        return _row(rows.values_list("key", "value").first())


def _row(row: Any) -> tuple[bytes, bytes] | None:
    if row is None:
        return None
    return bytes(row[0]), bytes(row[1]) if row[1] is not None else b""


class QueuedMessage(models.Model):
    """A parked message: `key` as in `wire/keys.py`, `value` the Go program's CBOR.

    No column repeats what the key holds: the queue and the enqueue time are
    read from the key, so a database written by the Go program imports as is.
    `signature` is the app's own bookkeeping beside them.
    """

    key = HexKeyField(primary_key=True, max_length=KEY_BYTES)
    value = models.BinaryField()
    # The cause of the last failed delivery (`causes.signature_of(LastError)`),
    # written by the drain in the statement that records the attempt, and by a
    # park (or the search's indexer) for a message carrying a LastError; NULL for
    # a row with no failure recorded and for rows the Go program wrote. Not part of the Go
    # program's table: the kv import and export move only key and value.
    signature = ExactTextField(  # NULL: no failure recorded, not ""
        max_length=200, null=True, blank=True, editable=False
    )
    # When a message that failed under a backoff is next due (`drain.policy`),
    # written with its failed attempt; NULL: due now. The (due_at, key) index
    # lets a drain walk the due rows of a queue without reading the waiting ones.
    due_at = models.DateTimeField(null=True, blank=True, editable=False)
    # 1 while the row's words are not yet in `SearchTerm` (`queue.search.index`):
    # the database's default marks every INSERT, whoever writes it (a park, the
    # split, a kv import, a load, a move), and every UPDATE of `value` sets it again;
    # the indexer clears it. NULL: indexed. A park writes no posting of its own.
    search_pending = models.SmallIntegerField(null=True, blank=True, editable=False, db_default=1)

    objects = QueuedMessageQuerySet.as_manager()

    class Meta:
        indexes = [
            # A row parked and not yet failed in a drain has no signature: no entry.
            NotNullIndex(fields=["signature", "key"], name="deadletter_signature_key"),
            models.Index(fields=["due_at", "key"], name="deadletter_due_key"),
            # Only the rows waiting for the indexer have an entry.
            NotNullIndex(fields=["search_pending", "key"], name="deadletter_search_pending"),
        ]
        verbose_name = "queued message"
        verbose_name_plural = "queued messages"
        permissions = [
            ("drain_queuedmessage", "Can hand queued messages back to their handler"),
            ("redrive_queuedmessage", "Can start and cancel redrives of queued messages"),
            ("view_unredacted_queuedmessage", "Can see the values DEADLETTER_REDACT hides"),
        ]

    def __str__(self) -> str:
        """The queue and when the row was parked (UTC, to the microsecond, so two
        rows tell apart): how the admin titles a message; its key is shown once, in hex."""
        when = self.enqueued_at
        if when is None:
            return (
                f"{self.queue} (legacy row)" if self.is_legacy else f"{self.queue} {self.key_hex}"
            )
        return f"{self.queue}, parked {when:%Y-%m-%d %H:%M:%S.%f} UTC"

    @property
    def key_bytes(self) -> bytes:
        return bytes(self.key)

    @property
    def key_hex(self) -> str:
        return self.key_bytes.hex()

    @property
    def queue(self) -> str:
        return keys.queue_of(self.key_bytes)

    @property
    def is_legacy(self) -> bool:
        return keys.is_legacy_key(self.key_bytes)

    @property
    def enqueued_at(self) -> datetime | None:
        """When the row was written, from its key; None for a legacy aggregate row."""
        return keys.written_at(self.key_bytes)


class SearchTerm(models.Model):
    """One word of a parked row (`queue.search.terms`): the search's index.

    Written by the indexer from the rows marked `search_pending`, in batches, so a
    park pays for none of it. A posting may outlive its row (a delivery deletes
    the row alone; the sweep removes the posting later) or describe an older
    value of it: a search joins the live row and checks each match against the
    message itself, so the index only narrows and never decides.
    """

    pk = models.CompositePrimaryKey("term", "key")
    term = ExactTextField(max_length=TERM_CHARS)
    key = HexKeyField(max_length=KEY_BYTES)

    class Meta:
        app_label = "deadletter"

    def __str__(self) -> str:
        return f"{self.term} {bytes(self.key).hex()}"
