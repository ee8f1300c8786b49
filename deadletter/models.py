"""The queue table: one row per message, the key holds everything to order and bound it."""

from __future__ import annotations

from datetime import datetime

from django.db import models

from deadletter import keys


class QueuedMessage(models.Model):
    """A parked message: `key` as in `keys.py`, `value` the Go program's CBOR.

    No column repeats what the key holds: the queue and the enqueue time are
    read from the key, so a database written by the Go program imports as is.
    """

    key = models.BinaryField(primary_key=True, max_length=keys.MAX_QUEUE_NAME_BYTES + 17)
    value = models.BinaryField()

    class Meta:
        verbose_name = "queued message"
        verbose_name_plural = "queued messages"
        permissions = [("drain_queuedmessage", "Can hand queued messages back to their handler")]

    def __str__(self) -> str:
        return f"{self.queue} {self.key_hex}"

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
