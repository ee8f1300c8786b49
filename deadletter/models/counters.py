"""The operational bookkeeping beside the queue: drop counters, each queue's last
drain pass, and the expiry warnings already sent."""

from __future__ import annotations

from django.db import models

from deadletter.models.fields import KEY_BYTES, ExactTextField, HexKeyField
from deadletter.wire import keys

DROP_TABLE = "deadletter_dropcount"
WARNING_TABLE = "deadletter_expirywarning"


class DropCount(models.Model):
    """Messages of `queue` thrown away for `reason` since the table was created.

    Only ever incremented, in the transaction that deletes the rows, so it is a
    Prometheus counter that survives restarts and is never ahead of the drops.
    """

    queue = ExactTextField(max_length=keys.MAX_QUEUE_NAME_BYTES)
    reason = models.CharField(max_length=20)
    count = models.BigIntegerField(default=0)

    class Meta:
        app_label = "deadletter"
        constraints = [
            models.UniqueConstraint(fields=["queue", "reason"], name="deadletter_dropcount_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.queue} {self.reason} {self.count}"


class QueuePass(models.Model):
    """How the last drain pass over `queue` ended: the overview and the metrics say
    whether its breaker paused the queue, and when."""

    queue = ExactTextField(max_length=keys.MAX_QUEUE_NAME_BYTES, unique=True)
    finished_at = models.DateTimeField()
    paused = models.BooleanField(default=False)

    class Meta:
        app_label = "deadletter"

    def __str__(self) -> str:
        return f"{self.queue} {'paused' if self.paused else 'ran'} {self.finished_at}"


class ExpiryWarning(models.Model):
    """A message (by row key) already warned about as close to its age limit:
    `DEADLETTER_EXPIRY_WARNING` warns once per message, not once per run."""

    key = HexKeyField(primary_key=True, max_length=KEY_BYTES)
    warned_at = models.DateTimeField()

    class Meta:
        app_label = "deadletter"

    def __str__(self) -> str:
        return bytes(self.key).hex()
