"""A queue's failure causes tracked as incidents (`Cause`) and the alerts sent about
them (`AlertState`)."""

from __future__ import annotations

from django.db import models

from deadletter.models.fields import ExactTextField
from deadletter.wire import keys


class Cause(models.Model):
    """A failure signature of one queue tracked as an incident (`queue.incidents`):
    first and last seen, how many failures, and what an operator said of it.

    Kept in step by every write that records a failure (one upsert of this row),
    so the admin lists causes without counting the queue table. A resolved cause
    seen again reopens.
    """

    class Status(models.TextChoices):
        OPEN = "open"
        ACKNOWLEDGED = "acknowledged"
        RESOLVED = "resolved"
        MUTED = "muted"

    id = models.BigAutoField(primary_key=True)
    queue = ExactTextField(max_length=keys.MAX_QUEUE_NAME_BYTES)
    signature = ExactTextField(max_length=200)
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    count = models.BigIntegerField(default=0)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.OPEN)
    muted_until = models.DateTimeField(null=True, blank=True)
    # When it last opened (first seen, or reopened after a resolve): the alerts'
    # new_cause and reopened_cause go by it.
    opened_at = models.DateTimeField()
    reopened = models.BooleanField(default=False)
    resolved_at = models.DateTimeField(null=True, blank=True)
    owner = models.CharField(max_length=150, blank=True, default="")
    note = models.TextField(blank=True, default="")

    class Meta:
        app_label = "deadletter"
        ordering = ["-last_seen", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["queue", "signature"], name="deadletter_cause_uniq")
        ]
        indexes = [
            models.Index(fields=["status", "last_seen", "id"], name="deadletter_cause_status"),
            models.Index(fields=["queue", "last_seen", "id"], name="deadletter_cause_queue"),
            models.Index(fields=["opened_at", "id"], name="deadletter_cause_opened"),
        ]
        verbose_name = "cause"
        verbose_name_plural = "causes"

    def __str__(self) -> str:
        return f"{self.queue}: {self.signature} ({self.status})"


class AlertState(models.Model):
    """Whether an alert rule fires for a queue and subject (a cause's signature, or
    empty), and whether it was sent: a row, claimed by the evaluator that sends it
    (`claimed_by` until `claimed_until`), so two evaluators at once never send the
    same alert twice, and one alert goes out until it clears."""

    class State(models.TextChoices):
        FIRING = "firing"
        CLEARED = "cleared"

    id = models.BigAutoField(primary_key=True)
    rule = models.CharField(max_length=40)
    queue = ExactTextField(max_length=keys.MAX_QUEUE_NAME_BYTES, blank=True, default="")
    subject = ExactTextField(max_length=200, blank=True, default="")
    state = models.CharField(max_length=20, choices=State.choices, default=State.FIRING)
    fired_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)
    cleared_at = models.DateTimeField(null=True, blank=True)
    cleared_sent_at = models.DateTimeField(null=True, blank=True)
    claimed_by = models.CharField(max_length=200, blank=True, default="")
    claimed_until = models.DateTimeField(null=True, blank=True)
    figures = models.TextField(blank=True, default="")

    class Meta:
        app_label = "deadletter"
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "queue", "subject"], name="deadletter_alertstate_uniq"
            )
        ]
        indexes = [models.Index(fields=["state", "id"], name="deadletter_alertstate_state")]

    def __str__(self) -> str:
        about = f" {self.subject}" if self.subject else ""
        return f"{self.rule} {self.queue}{about} ({self.state})"
