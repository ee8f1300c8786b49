"""What a message leaves behind: the archive of messages that left their queue
(`ArchivedMessage`) and the history of its failed attempts (`Attempt`)."""

from __future__ import annotations

from django.db import models

from deadletter.models.fields import KEY_BYTES, ExactTextField, HexKeyField
from deadletter.wire import keys


class ArchivedMessage(models.Model):
    """A message that left its queue other than by delivery (`queue.archive`): its
    original row, key and bytes, why (`reason`), who (`actor`: a user name, or
    `drain`) and when, kept for `DEADLETTER_ARCHIVE_FOR` so that it can be read
    and restored. One key may be archived more than once (an edited message keeps
    its key, its original is archived): `id` orders the entries.
    """

    class Reason(models.TextChoices):
        DELETED = "deleted"
        EXPIRED = "expired"
        PERMANENT = "permanent"
        MAX_ATTEMPTS = "max_attempts"
        CORRUPT = "corrupt"
        UNSEALED = "unsealed"
        EDITED = "edited"
        KILLED = "killed"

    id = models.BigAutoField(primary_key=True)
    key = HexKeyField(max_length=KEY_BYTES)
    queue = ExactTextField(max_length=keys.MAX_QUEUE_NAME_BYTES)
    value = models.BinaryField()
    reason = models.CharField(max_length=20, choices=Reason.choices)
    actor = models.CharField(max_length=150, blank=True, default="")
    archived_at = models.DateTimeField()
    # The message's LastError and cause when it left, so the archive filters and
    # shows them without decoding each row; empty for a corrupt row.
    last_error = models.TextField(blank=True, default="")
    signature = ExactTextField(max_length=200, null=True, blank=True)

    class Meta:
        app_label = "deadletter"
        ordering = ["id"]
        indexes = [
            # A queue's entries oldest first, its count, and retention by queue.
            models.Index(fields=["queue", "archived_at", "id"], name="deadletter_archive_queue"),
            # A queue's entries of one reason: the overview's count of those set aside as killed.
            models.Index(fields=["queue", "reason", "id"], name="deadletter_archive_reason"),
            models.Index(fields=["key", "id"], name="deadletter_archive_key"),
            models.Index(fields=["archived_at", "id"], name="deadletter_archive_at"),
        ]
        verbose_name = "archived message"
        verbose_name_plural = "archived messages"
        permissions = [
            ("restore_archivedmessage", "Can restore archived messages to their queue"),
        ]

    def __str__(self) -> str:
        return f"{self.queue} {bytes(self.key).hex()} ({self.reason})"


class Attempt(models.Model):
    """One failed delivery attempt of the message `key` (`queue.history`): when, how
    long its handler ran, what came of it, the error (cut) and who tried (`drain`,
    `service`, `worker`, `retry:<user>`, `redrive:<id>`). The last
    `history.KEEP` of a key are kept; they follow their message into the archive
    and back, and go with it when it is delivered or purged.
    """

    id = models.BigAutoField(primary_key=True)
    key = HexKeyField(max_length=KEY_BYTES)
    at = models.DateTimeField()
    duration = models.FloatField(null=True, blank=True)
    outcome = models.CharField(max_length=20)
    error = models.TextField(blank=True, default="")
    actor = models.CharField(max_length=150, blank=True, default="")

    class Meta:
        app_label = "deadletter"
        ordering = ["id"]
        indexes = [models.Index(fields=["key", "id"], name="deadletter_attempt_key")]

    def __str__(self) -> str:
        return f"{bytes(self.key).hex()} {self.outcome} {self.at}"
