"""The queue table: one row per message, the key holds everything to order and bound it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models

from deadletter import keys
from deadletter.rowsets import QueuedMessageQuerySet


class HexKey(bytes):
    """A row key read from the database: plain bytes whose text form is lowercase hex.

    Django's admin puts `str(pk)` into URLs, action checkboxes, log entries and
    confirmation forms; with this every one of them carries the hex that
    `HexKeyField.to_python` reads back, with no per-view override.
    """

    def __str__(self) -> str:
        return self.hex()


class HexKeyField(models.BinaryField):
    """A `BinaryField` whose text form is lowercase hex (`keys.to_text`), both ways.

    Any even-length hex is a key here, however long: a row the Go program or
    an older release wrote with an unusual key must still open and delete.
    """

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> HexKey | None:
        return None if value is None else HexKey(bytes(value))

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return HexKey(_from_hex(value))
            except ValueError as exc:
                raise ValidationError(str(exc), code="invalid") from exc
        if isinstance(value, bytes | bytearray | memoryview):
            return HexKey(bytes(value))
        return value

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        if isinstance(value, str):
            return _from_hex(value)
        if isinstance(value, bytearray | memoryview):
            return bytes(value)
        return value

    def value_to_string(self, obj: models.Model) -> str:
        value = self.value_from_object(obj)
        return "" if value is None else bytes(value).hex()  # type: ignore[call-overload]


def _from_hex(text: str) -> bytes:
    """Hex to bytes; a `ValueError` naming the text for anything else."""
    if len(text) % 2 or not all(c in "0123456789abcdefABCDEF" for c in text):
        raise ValueError(f"not a key in hex: {text[:80]!r}")
    return bytes.fromhex(text)


class QueuedMessage(models.Model):
    """A parked message: `key` as in `keys.py`, `value` the Go program's CBOR.

    No column repeats what the key holds: the queue and the enqueue time are
    read from the key, so a database written by the Go program imports as is.
    `signature` is the app's own bookkeeping beside them.
    """

    key = HexKeyField(primary_key=True, max_length=keys.MAX_QUEUE_NAME_BYTES + 17)
    value = models.BinaryField()
    # The cause of the last failed delivery (`causes.signature_of(LastError)`),
    # written by the drain in the statement that records the attempt; NULL for a
    # row never drained and for rows the Go program wrote. Not part of the Go
    # program's table: the kv import and export move only key and value.
    signature = models.CharField(  # noqa: DJ001  (NULL: no failure recorded, not "")
        max_length=200, null=True, blank=True, editable=False
    )

    objects = QueuedMessageQuerySet.as_manager()

    class Meta:
        indexes = [models.Index(fields=["signature", "key"], name="deadletter_signature_key")]
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


# The operational bookkeeping tables (drop counters, expiry warnings) live in
# their own module; imported here so Django registers them with the app.
from deadletter.counters import DropCount, ExpiryWarning  # noqa: E402

__all__ = ["DropCount", "ExpiryWarning", "HexKey", "HexKeyField", "QueuedMessage"]
