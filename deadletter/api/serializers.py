"""What the API reads and writes: DRF serializers for validation and output.

A message travels with its fields in snake case and their JSON types, times
as RFC 3339 with up to nine fraction digits, and unknown keys in `extra`
(on input, unknown top-level keys are kept there too).
"""

from __future__ import annotations

import dataclasses
import fnmatch
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from deadletter.api.fields import (
    ExtraField,
    Int64Field,
    KeyField,
    TextField,
    TimeField,
    format_time,
    format_unix_ns,
    queue_name,
)
from deadletter.conf import conf
from deadletter.queue import age, browse, history, redaction, seals, search
from deadletter.queue.browse import Row
from deadletter.queue.search import qualifiers
from deadletter.reports.summaries import QueueStatus
from deadletter.wire import codec, keys
from deadletter.wire.messages import Message

MAX_PAGE_SIZE = 200
DEFAULT_PAGE_SIZE = 50
MAX_DRAIN_LIMIT = 1000
DEFAULT_DRAIN_LIMIT = 100


def max_message_bytes() -> int:
    """`DEADLETTER_MAX_MESSAGE_BYTES` (1 MiB by default): the largest body a park takes."""
    return conf.MAX_MESSAGE_BYTES


class QueueNameSerializer(serializers.Serializer):
    """A queue name from the URL: any text the queue accepts (1..255 UTF-8 bytes, no NUL)."""

    name = TextField()

    def validate_name(self, value: str) -> str:
        return queue_name(value)


class KeySerializer(serializers.Serializer):
    key = KeyField()


def key_of(text: str) -> bytes:
    """A row's key from the URL; a 400 naming `key` when it is not one."""
    checked = KeySerializer(data={"key": text})
    checked.is_valid(raise_exception=True)
    key: bytes = checked.validated_data["key"]
    return key


def api_queue_refusal(name: str) -> str | None:
    """Why the API may not park into queue `name` (`DEADLETTER_API_QUEUES` allows no
    pattern it matches), or None: any queue when the setting is None."""
    patterns = conf.API_QUEUES
    if patterns is None or any(fnmatch.fnmatchcase(name, p) for p in patterns):
        return None
    return (
        f"The API may not park into queue {name!r}: DEADLETTER_API_QUEUES allows "
        f"{', '.join(map(repr, patterns)) or 'no queue'} only."
    )


class MessageSerializer(serializers.Serializer):
    """One message, read and written; `code_name` is the name the project gives its
    event code (`DEADLETTER_EVENT_CODES`), null when it gives none."""

    timestamp = TimeField(allow_null=True, required=False, default=None)
    queued_at = TimeField(
        allow_null=True,
        required=False,
        default=None,
        help_text="The time of first failure; stamped with now when null.",
    )
    username = TextField(required=False, default="")
    subject = TextField(required=False, default="")
    descriptions = serializers.ListField(
        child=TextField(), allow_null=True, required=False, default=None
    )
    fields = serializers.ListField(child=TextField(), allow_null=True, required=False, default=None)
    skip_recipients = serializers.ListField(
        child=TextField(), allow_null=True, required=False, default=None
    )
    code = Int64Field(required=False, default=0)
    code_name = serializers.SerializerMethodField()
    extra = ExtraField(required=False, default=dict)

    @extend_schema_field({"type": "string", "nullable": True, "readOnly": True})
    def get_code_name(self, msg: Message) -> str | None:
        return browse.code_name(msg.code)

    def validate_extra(self, value: dict[str, Any]) -> dict[str, Any]:
        """An integration's keys (a parked task's) come from that integration
        only: its handler would act on them."""
        try:
            seals.refuse_reserved(value)
        except seals.ReservedKey as exc:
            raise serializers.ValidationError(str(exc)) from None
        return value

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        # Unknown top-level keys are the message's own unknown keys: kept in `extra`.
        if isinstance(data, dict):
            known = set(self.fields)
            unknown = {k: v for k, v in data.items() if k not in known}
            if unknown:
                extra = data.get("extra", {})
                if not isinstance(extra, dict):
                    raise serializers.ValidationError({"extra": ["Expected an object."]})
                both = sorted(set(unknown) & set(extra))
                if both:
                    raise serializers.ValidationError(
                        {"extra": [f"{both[0]!r} is given both at the top level and in extra."]}
                    )
                data = {k: v for k, v in data.items() if k in known}
                data["extra"] = {**extra, **unknown}
        return super().to_internal_value(data)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """The message must encode as Go reads it: a Go-readable code, no unknown
        key that Go would read as a field, within the size limit."""
        msg = message_of(attrs)
        try:
            value = codec.encode_one(msg)
        except (codec.CodecError, TypeError, ValueError, OverflowError) as exc:
            text = str(exc)
            field = "code" if "Code" in text else "extra" if "extra" in text else "non_field_errors"
            raise serializers.ValidationError({field: [text]}) from None
        limit = max_message_bytes()
        if len(value) > limit:
            raise serializers.ValidationError(
                {"payload": [f"the message is {len(value)} bytes stored; the limit is {limit}"]}
            )
        attrs["message"] = msg
        return attrs

    def validate_queued_at(self, value: Any) -> Any:
        """A first failure in the future would never reach the age limit."""
        error = age.first_failure_error(value)
        if error is not None:
            raise serializers.ValidationError(error)
        return value


def message_of(attrs: dict[str, Any]) -> Message:
    return Message(
        timestamp=attrs.get("timestamp"),
        queued_at=attrs.get("queued_at"),
        username=attrs.get("username", ""),
        subject=attrs.get("subject", ""),
        descriptions=attrs.get("descriptions"),
        fields=attrs.get("fields"),
        skip_recipients=attrs.get("skip_recipients"),
        code=attrs.get("code", 0),
        extra=attrs.get("extra") or {},
    )


class ParkedSerializer(serializers.Serializer):
    """The answer to a park: the new row's key, its queue and its URL."""

    key = serializers.CharField()
    queue = serializers.CharField()
    url = serializers.URLField()


class RowSerializer(serializers.Serializer):
    """One stored row: `messages` is empty and `corrupt` true for a row that does
    not decode, `too_large` for one over `DEADLETTER_MAX_ROW_BYTES` (never
    decoded); a legacy aggregate row (`legacy`) holds a whole queue."""

    key = KeyField()
    queue = serializers.SerializerMethodField()
    enqueued_at = serializers.SerializerMethodField()
    legacy = serializers.BooleanField(source="is_legacy")
    corrupt = serializers.SerializerMethodField()
    too_large = serializers.BooleanField(
        help_text="Over DEADLETTER_MAX_ROW_BYTES: never decoded, `messages` is empty."
    )
    size = serializers.IntegerField(help_text="The stored value's size in bytes.")
    messages = serializers.SerializerMethodField()

    def get_queue(self, row: Row) -> str:
        return keys.queue_of(row.key)

    @extend_schema_field({"type": "string", "format": "date-time", "nullable": True})
    def get_enqueued_at(self, row: Row) -> str | None:
        try:
            return format_unix_ns(keys.parse_key(row.key).time_ns)
        except ValueError:
            return None

    def get_corrupt(self, row: Row) -> bool:
        return row.messages is None and not row.too_large

    @extend_schema_field(MessageSerializer(many=True))
    def get_messages(self, row: Row) -> list[Any]:
        return shown_messages(row.messages, keys.queue_of(row.key), self.context)


_MESSAGE_OUTPUT = MessageSerializer()


def viewer(request: Any) -> dict[str, Any]:
    """The serializer context that shows messages as `request`'s user may see them:
    without it, every redacted value (`queue.redaction`) is masked."""
    return {"reveal": redaction.reveals(request.user)}


def shown_messages(
    msgs: list[Message] | None, queue: str, context: dict[str, Any]
) -> list[dict[str, Any]]:
    """The JSON of a row's messages, redacted unless `context` (`viewer`) reveals."""
    # One message serializer for every row of a page: building one per row
    # (its fields are deep-copied) cost more than the messages' output.
    show = _MESSAGE_OUTPUT.to_representation
    reveal = bool(context.get("reveal", False))
    return [show(redaction.redacted(msg, queue, reveal=reveal)) for msg in msgs or []]


def shown_attempts(
    key: bytes, msgs: list[Message] | None, queue: str, context: dict[str, Any]
) -> list[Any]:
    """The JSON of the attempts of `key`, oldest first, each error scrubbed of the
    row's redacted values unless `context` (`viewer`) reveals (`redaction.scrubber`)."""
    scrub = redaction.scrubber(queue, msgs, reveal=bool(context.get("reveal", False)))
    attempts = [
        dataclasses.replace(attempt, error=scrub(attempt.error))
        for attempt in history.attempts_of(key)
    ]
    return list(AttemptSerializer(attempts, many=True).data)


class AttemptSerializer(serializers.Serializer):
    """One failed attempt of a message (`queue.history`)."""

    at = serializers.DateTimeField(help_text="When the handler was called.")
    duration = serializers.FloatField(
        allow_null=True, help_text="Seconds the handler ran; null when its process was killed."
    )
    outcome = serializers.ChoiceField(choices=[str(o) for o in history.AttemptOutcome])
    error = serializers.CharField(help_text="The error, cut to 1024 UTF-8 bytes.")
    actor = serializers.CharField(
        help_text="Who tried: drain, service, worker, retry:<user>, redrive:<id>."
    )


class MessageRowSerializer(RowSerializer):
    """One row on its own page, with its failed attempts oldest first (the last
    `history.KEEP`); a page of rows leaves them out (a read a row)."""

    attempts_history = serializers.SerializerMethodField()

    @extend_schema_field(AttemptSerializer(many=True))
    def get_attempts_history(self, row: Row) -> list[Any]:
        return shown_attempts(row.key, row.messages, keys.queue_of(row.key), self.context)


class PageQuerySerializer(serializers.Serializer):
    """A page of a queue: the rows after key `after` (exclusive), at most `limit`,
    those a search `q` matches when it is given."""

    after = KeyField(required=False, help_text="The last key of the previous page.")
    limit = serializers.IntegerField(
        min_value=1, max_value=MAX_PAGE_SIZE, default=DEFAULT_PAGE_SIZE, required=False
    )
    q = serializers.CharField(
        required=False,
        allow_blank=True,
        trim_whitespace=True,
        max_length=search.MAX_QUERY_CHARS,
        help_text=qualifiers.help_text(),
    )

    def validate_q(self, value: str) -> search.Query:
        try:
            return search.parse(value)
        except search.SearchError as exc:
            raise serializers.ValidationError(str(exc)) from None


class PageSerializer(serializers.Serializer):
    results = RowSerializer(many=True)
    next = serializers.URLField(allow_null=True, help_text="The next page; null on the last.")


class QueuePageQuerySerializer(serializers.Serializer):
    """A page of the queue list: the queues whose name sorts after `after`, at most `limit`."""

    after = TextField(required=False, help_text="The last queue name of the previous page.")
    limit = serializers.IntegerField(
        min_value=1, max_value=MAX_PAGE_SIZE, default=DEFAULT_PAGE_SIZE, required=False
    )

    def validate_after(self, value: str) -> str:
        return queue_name(value)


class QueueSerializer(serializers.Serializer):
    """A queue at a glance; `oldest_age_seconds` (since its head message first
    failed) is the standard dead-letter alarm."""

    name = serializers.CharField()
    depth = serializers.IntegerField(help_text="Rows in the queue.")
    oldest_enqueued_at = serializers.SerializerMethodField()
    oldest_queued_at = serializers.SerializerMethodField()
    oldest_age_seconds = serializers.SerializerMethodField()

    @extend_schema_field({"type": "string", "format": "date-time", "nullable": True})
    def get_oldest_enqueued_at(self, status: QueueStatus) -> str | None:
        ns = status.oldest_enqueued_ns
        return None if ns is None else format_unix_ns(ns)

    @extend_schema_field({"type": "string", "format": "date-time", "nullable": True})
    def get_oldest_queued_at(self, status: QueueStatus) -> str | None:
        moment = status.oldest_queued_at
        return None if moment is None else format_time(moment)

    @extend_schema_field({"type": "number", "format": "double", "nullable": True})
    def get_oldest_age_seconds(self, status: QueueStatus) -> float | None:
        return status.oldest_age_seconds(self.context.get("now_ns"))


@extend_schema_field({"type": "integer", "minimum": 1, "maximum": MAX_DRAIN_LIMIT})
class DrainLimitField(Int64Field):
    """The drain's `limit`: a JSON integer, 1..MAX_DRAIN_LIMIT."""


class DrainRequestSerializer(serializers.Serializer):
    limit = DrainLimitField(
        required=False,
        default=DEFAULT_DRAIN_LIMIT,
        help_text=f"Messages to hand over at most (1..{MAX_DRAIN_LIMIT}).",
    )
    ignore_backoff = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Hand over the messages a backoff holds back too, in key order.",
    )

    def validate_limit(self, value: int) -> int:
        if not 1 <= value <= MAX_DRAIN_LIMIT:
            raise serializers.ValidationError(f"Must be between 1 and {MAX_DRAIN_LIMIT}.")
        return value


class DroppedSerializer(serializers.Serializer):
    expired = serializers.IntegerField()
    corrupt = serializers.IntegerField()
    permanent = serializers.IntegerField()
    max_attempts = serializers.IntegerField()


class DrainReportSerializer(serializers.Serializer):
    """What the drain did (`deadletter.drain.DrainReport`)."""

    queues = serializers.ListField(child=serializers.CharField())
    workers = serializers.IntegerField()
    delivered = serializers.IntegerField()
    requeued = serializers.IntegerField()
    dropped = DroppedSerializer()
    failed = serializers.IntegerField()
    errors = serializers.IntegerField()
    elapsed = serializers.FloatField()
    rate = serializers.FloatField(allow_null=True)
    held = serializers.IntegerField(
        help_text="Messages kept for an operator (NeedsOperator): never dropped on that ground."
    )
    waiting = serializers.IntegerField(help_text="Messages a backoff held back, left alone.")
    next_due = serializers.DateTimeField(
        allow_null=True, help_text="When the first of the waiting messages is due."
    )
    paused = serializers.ListField(
        child=serializers.CharField(), help_text="Queues their breaker stopped for the pass."
    )
    stopped_by = serializers.CharField(allow_null=True)
    aborted_by = serializers.CharField(allow_null=True)


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()


__all__ = [
    "DrainReportSerializer",
    "DrainRequestSerializer",
    "ErrorSerializer",
    "KeySerializer",
    "key_of",
    "MessageRowSerializer",
    "MessageSerializer",
    "PageQuerySerializer",
    "PageSerializer",
    "ParkedSerializer",
    "QueueNameSerializer",
    "QueueSerializer",
    "RowSerializer",
    "shown_messages",
    "viewer",
]
