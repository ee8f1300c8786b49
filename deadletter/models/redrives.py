"""Redrive: a stored plan to hand a queue's matching messages back, and its progress;
`RedriveMark`: the keys of its walk past its cursor, so a kill loses no count."""

from __future__ import annotations

from django.db import models

from deadletter.models.fields import KEY_BYTES, ExactTextField, HexKeyField, StepsField
from deadletter.wire import keys


class Redrive(models.Model):
    """A stored redrive: the messages of `queue` a filter matched when it was
    planned, handed back to their handler (or moved to `destination`) at a rate,
    resumable from `cursor` after a crash.

    The plan is bounded by `until` (the queue's tail key when it was counted):
    what is parked later is not in it. Counts are written as the run goes, so the
    admin and the API show progress another process makes.
    """

    class Status(models.TextChoices):
        PLANNED = "planned"
        RUNNING = "running"
        FINISHED = "finished"
        STOPPED = "stopped"
        CANCELLED = "cancelled"
        FAILED = "failed"

    queue = ExactTextField(max_length=keys.MAX_QUEUE_NAME_BYTES)
    search = models.TextField(blank=True, default="")
    # Bounds on the first failure (`QueuedAt`), as `--after` / `--before` give them.
    after = models.DateTimeField(null=True, blank=True)
    before = models.DateTimeField(null=True, blank=True)
    destination = ExactTextField(max_length=keys.MAX_QUEUE_NAME_BYTES, null=True, blank=True)
    rate = models.FloatField(null=True, blank=True)
    ramp = StepsField(max_length=200, default=list, blank=True)
    stop_after = models.FloatField(null=True, blank=True)
    ignore_backoff = models.BooleanField(default=False)
    concurrency = models.PositiveIntegerField(default=1)
    # Whether its search may match what DEADLETTER_REDACT masks: False when it was
    # planned by a user who may not see those values, so neither its count nor its
    # run tells them that a masked value occurs.
    reveal = models.BooleanField(default=True)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PLANNED)
    reason = models.TextField(blank=True, default="")
    started_by = models.CharField(max_length=150, blank=True, default="")
    until = HexKeyField(max_length=KEY_BYTES, null=True, blank=True)
    cursor = HexKeyField(max_length=KEY_BYTES, null=True, blank=True)
    matched = models.BigIntegerField(default=0)
    delivered = models.BigIntegerField(default=0)
    failed = models.BigIntegerField(default=0)
    dropped = models.BigIntegerField(default=0)
    moved = models.BigIntegerField(default=0)
    remaining = models.BigIntegerField(default=0)
    # Why matched messages were not handed over: gone before the run reached them
    # (delivered by a drain, deleted, edited), held by another drain, waiting on a
    # backoff, or (a move) their key taken in the destination. Once it has finished,
    # `remaining` is their sum.
    gone = models.BigIntegerField(default=0)
    held = models.BigIntegerField(default=0)
    waiting = models.BigIntegerField(default=0)
    conflicts = models.BigIntegerField(default=0)
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Who runs it now (`host:pid`) and when it last wrote: a runner that stopped
    # writing is gone, and `--resume` or the service takes the redrive over.
    runner = models.CharField(max_length=200, blank=True, default="")
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "deadletter"
        ordering = ["-id"]
        indexes = [models.Index(fields=["status", "id"], name="deadletter_redrive_status")]

    def __str__(self) -> str:
        target = f" to {self.destination}" if self.destination else ""
        return f"redrive {self.pk} of {self.queue}{target} ({self.status})"


class RedriveMark(models.Model):
    """One key of a redrive's walk past its cursor: `counted` once its outcome is in
    the redrive's counts (so a resumed run passes over it), else taken: written in
    the transaction that claims it (on a server) or just before its handler (SQLite),
    so a run that resumes after a kill knows it was handed over and finds out how it
    ended. Marks at or below the cursor are deleted with the count that covers them.

    No database constraint on `redrive`: a mark is written while the handler runs,
    and MySQL's check of a foreign key would lock the redrive's row against the
    counts and the heartbeat meanwhile."""

    id = models.BigAutoField(primary_key=True)
    redrive = models.ForeignKey(
        Redrive, on_delete=models.CASCADE, db_constraint=False, related_name="+"
    )
    key = HexKeyField(max_length=KEY_BYTES)
    counted = models.BooleanField(default=False)
    taken_at = models.DateTimeField()

    class Meta:
        app_label = "deadletter"
        constraints = [
            models.UniqueConstraint(fields=["redrive", "key"], name="deadletter_redrivemark_key")
        ]

    def __str__(self) -> str:
        return f"redrive {self.redrive_id} key {bytes(self.key).hex()}"
