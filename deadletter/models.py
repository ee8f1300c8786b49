"""Every model of the app: the queue table (one row per message, the key holds
everything to order and bound it) with its queryset for the non-hot paths, and
the operational bookkeeping beside it (drop counters, expiry warnings).

The queryset's statements are plain ORM, so every Django instrument sees
them; the hot paths (store, dequeue, a scan's pages) stay raw SQL in `store/sql.py`.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter.wire import keys

DROP_TABLE = "deadletter_dropcount"
WARNING_TABLE = "deadletter_expirywarning"
# The longest key the app writes: a queue name of `MAX_QUEUE_NAME_BYTES`, a NUL,
# two 8-byte numbers. The column's bound on MySQL/MariaDB (`HexKeyField.db_type`).
KEY_BYTES = keys.MAX_QUEUE_NAME_BYTES + 17
# The longest word the search index keeps; a longer one is indexed by its start.
TERM_CHARS = 64


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

    Text is read by `keys.from_text`, up to its generous limit: a row the Go
    program or an older release wrote with an unusual key must still open and delete.
    """

    def db_type(self, connection: BaseDatabaseWrapper) -> str | None:
        """`VARBINARY(max_length)` on MySQL/MariaDB, where Django's `LONGBLOB` cannot
        be a primary key; a binary string compares byte for byte, as the key order needs."""
        if connection.vendor == "mysql":
            return f"varbinary({self.max_length})"
        return super().db_type(connection)

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> HexKey | None:
        return None if value is None else HexKey(bytes(value))

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return HexKey(keys.from_text(value))
            except ValueError as exc:
                raise ValidationError(str(exc), code="invalid") from exc
        if isinstance(value, bytes | bytearray | memoryview):
            return HexKey(bytes(value))
        return value

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        if isinstance(value, str):
            return keys.from_text(value)
        if isinstance(value, bytearray | memoryview):
            return bytes(value)
        return value

    def value_to_string(self, obj: models.Model) -> str:
        value = self.value_from_object(obj)
        return "" if value is None else bytes(value).hex()  # type: ignore[call-overload]


class ExactTextField(models.CharField):
    """A `CharField` that compares byte for byte on every backend, as SQLite's and
    PostgreSQL's do: MySQL/MariaDB's default collations fold case and trailing
    spaces, which would merge two queue names or two causes into one."""

    def db_type(self, connection: BaseDatabaseWrapper) -> str | None:
        if connection.vendor == "mysql":
            return f"varchar({self.max_length}) CHARACTER SET utf8mb4"
        return super().db_type(connection)

    def db_parameters(self, connection: BaseDatabaseWrapper) -> dict[str, Any]:
        params = super().db_parameters(connection)
        if connection.vendor == "mysql" and not self.db_collation:
            mariadb = getattr(connection, "mysql_is_mariadb", False)
            params["collation"] = "utf8mb4_nopad_bin" if mariadb else "utf8mb4_0900_bin"
        return params


if TYPE_CHECKING:  # django-stubs: what the field takes and what it gives
    _StepsBase = models.CharField[Sequence[int] | str, list[int]]
else:
    _StepsBase = models.CharField


class StepsField(_StepsBase):
    """A list of whole numbers (a redrive's ramp, `[1, 5, 20]`) kept as the text
    `1,5,20`. Django's `JSONField` would have `manage.py check` ask each database
    whether it holds JSON, connecting to databases a check should not touch."""

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> list[int]:
        return self.to_python(value)

    def to_python(self, value: Any) -> list[int]:
        if value is None or value == "":
            return []
        if isinstance(value, str):
            try:
                return [int(part) for part in value.split(",")]
            except ValueError as exc:
                raise ValidationError(f"not a list of whole numbers: {value!r}") from exc
        return [int(part) for part in value]

    def get_prep_value(self, value: Any) -> Any:
        if isinstance(value, list | tuple):
            return ",".join(str(int(part)) for part in value)
        return super().get_prep_value(value)

    def value_to_string(self, obj: models.Model) -> str:
        steps: list[int] = self.to_python(self.value_from_object(obj))
        return ",".join(map(str, steps))


class NotNullIndex(models.Index):
    """An index of only the rows whose first field is set (`WHERE field IS NOT NULL`)
    where the backend has partial indexes (SQLite, PostgreSQL), so a row that
    leaves the field NULL costs no entry in it; the whole column on MySQL/MariaDB,
    which has none (and with no warning that a condition is ignored: there is none)."""

    def create_sql(
        self, model: type[models.Model], schema_editor: Any, using: str = "", **kwargs: Any
    ) -> Any:
        if not schema_editor.connection.features.supports_partial_indexes:
            return super().create_sql(model, schema_editor, using, **kwargs)
        partial = copy.copy(self)
        partial.condition = models.Q(**{f"{self.fields[0]}__isnull": False})
        return models.Index.create_sql(partial, model, schema_editor, using, **kwargs)


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


class QueueAccess(models.Model):
    """What a group or a user may do on the queues whose names match `queues` (a
    shell-style pattern, `billing.*`). Once any row exists, a user who is not a
    superuser sees and acts on only the queues a row grants them, and only with
    the matching model permission too (`queue.access`); with none, the model
    permissions alone apply."""

    id = models.BigAutoField(primary_key=True)
    group = models.ForeignKey(
        "auth.Group", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
    )
    queues = models.CharField(max_length=255, help_text="A shell-style pattern: billing.*")
    view = models.BooleanField(default=True)
    retry = models.BooleanField(default=False)
    edit = models.BooleanField(default=False)
    # Named as the action it grants, so this field hides `Model.delete()` on an
    # instance: a rule is deleted through a queryset (the admin does), and a user's
    # or a group's deletion cascades through one.
    delete = models.BooleanField(default=False)  # type: ignore[assignment]
    redrive = models.BooleanField(default=False)

    class Meta:
        app_label = "deadletter"
        ordering = ["queues", "id"]
        verbose_name = "queue access"
        verbose_name_plural = "queue access"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(group__isnull=False, user__isnull=True)
                | models.Q(group__isnull=True, user__isnull=False),
                name="deadletter_queueaccess_one_holder",
            )
        ]

    def __str__(self) -> str:
        holder = f"group {self.group}" if self.group_id else f"user {self.user}"
        granted = [a for a in ("view", "retry", "edit", "delete", "redrive") if getattr(self, a)]
        return f"{holder} on {self.queues}: {', '.join(granted) or 'nothing'}"


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


__all__ = [
    "AlertState",
    "ArchivedMessage",
    "Attempt",
    "Cause",
    "DropCount",
    "ExactTextField",
    "ExpiryWarning",
    "HexKey",
    "HexKeyField",
    "QueuedMessage",
    "QueuedMessageQuerySet",
    "QueueAccess",
    "QueuePass",
    "Redrive",
    "SearchTerm",
    "StepsField",
]


class QueueOverview(QueuedMessage):
    """The queue overview's entry in the admin's index and sidebar: no table of its
    own (a proxy), an admin that only sends its viewers to the overview."""

    class Meta:
        proxy = True
        verbose_name = "queue overview"
        verbose_name_plural = "queue overview"
        default_permissions = ()
