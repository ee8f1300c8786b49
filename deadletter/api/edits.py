"""`PATCH messages/{key}/`: edit a parked message through `queue.edits.edit_msg`,
guarded by the row's ETag in `If-Match` (428 without one, 412 when stale).

Partial: only the fields the body names change; `extra` sets the keys it names
and keeps the others. Allowed with `change_queuedmessage` on a queue whose policy
says `"editable": True` (403 otherwise); what no edit changes (the first failure,
the drain's attempt count and last error, an integration's sealed keys) is a 400.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema_field
from rest_framework import exceptions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from deadletter.api.fields import ExtraField, Int64Field, TextField, TimeField, format_time
from deadletter.api.serializers import ErrorSerializer, RowSerializer, viewer
from deadletter.drain import inflight
from deadletter.queue import edits, redaction
from deadletter.wire import jsonvalues, keys
from deadletter.wire.gotime import GoOnlyTime, GoTime
from deadletter.wire.messages import Message

IF_MATCH = OpenApiParameter(
    "If-Match",
    str,
    OpenApiParameter.HEADER,
    required=True,
    description="The row's ETag as a GET of the message gave it (quoted): the edit is "
    "refused with 412 when the row has changed since, with 428 without it.",
)
ETAG = OpenApiParameter(
    "ETag",
    str,
    OpenApiParameter.HEADER,
    response=[200],
    description="The row's strong ETag, for If-Match: it changes whenever the row's stored "
    "bytes do and, keyed with the site's secret, reveals nothing of them.",
)


RESPONSES: dict[int, Any] = {
    403: OpenApiResponse(
        ErrorSerializer,
        description="Lacks change_queuedmessage, or the queue's policy is not editable.",
    ),
    404: OpenApiResponse(ErrorSerializer, description="No row with that key."),
    412: OpenApiResponse(
        ErrorSerializer, description="The row changed since that ETag (or is held by a drain)."
    ),
    428: OpenApiResponse(ErrorSerializer, description="No If-Match header."),
}


class PreconditionRequired(exceptions.APIException):
    status_code = status.HTTP_428_PRECONDITION_REQUIRED
    default_detail = "An edit needs If-Match with the row's ETag (GET the message first)."
    default_code = "precondition_required"


class PreconditionFailed(exceptions.APIException):
    status_code = status.HTTP_412_PRECONDITION_FAILED
    default_detail = "The message changed since that ETag: GET it again."
    default_code = "precondition_failed"


class MessageEditSerializer(serializers.Serializer):
    """The fields an edit may change, each optional; null clears a time or a list."""

    timestamp = TimeField(allow_null=True, required=False)
    username = TextField(required=False)
    subject = TextField(required=False)
    descriptions = serializers.ListField(child=TextField(), allow_null=True, required=False)
    fields = serializers.ListField(child=TextField(), allow_null=True, required=False)
    skip_recipients = serializers.ListField(child=TextField(), allow_null=True, required=False)
    code = Int64Field(required=False)
    extra = ExtraField(
        required=False, help_text="The keys to set; the message's other keys are kept."
    )

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if isinstance(data, dict):
            unknown = {
                name: [
                    "Kept: the time of first failure anchors the age limit."
                    if name == "queued_at"
                    else "Not a field an edit changes (keys of the message go in extra)."
                ]
                for name in data
                if name not in self.fields
            }
            if unknown:
                raise serializers.ValidationError(unknown)
        return dict(super().to_internal_value(data))


def edited(msg: Message, given: dict[str, Any]) -> Message:
    """`msg` with the fields `given` changed, `extra` merged key by key."""
    changes = {name: value for name, value in given.items() if name != "extra"}
    if "extra" in given:
        changes["extra"] = {**msg.extra, **given["extra"]}
    return msg.replace(**changes)


def quoted(etag: str) -> str:
    return f'"{etag}"'


def matches(header: str, etag: str) -> bool:
    """Whether an If-Match header names `etag` (strong comparison: a weak tag never
    matches; `*` does not say which version was read, so it does not either)."""
    return any(tag.strip() == quoted(etag) for tag in header.split(","))


@extend_schema_field(
    {"description": "The value before the edit (null: the key was added)", "nullable": True}
)
class ChangedValueField(serializers.Field):
    def to_representation(self, value: Any) -> Any:
        if isinstance(value, GoTime | GoOnlyTime):
            return format_time(value)
        return jsonvalues.to_json(value)


class ChangeSerializer(serializers.Serializer):
    field = serializers.CharField(source="name", help_text="`subject`, …, `extra.<key>`.")
    old = ChangedValueField()
    new = ChangedValueField()


class EditedRowSerializer(RowSerializer):
    """The row as it is after the edit, and what changed."""

    changed = ChangeSerializer(many=True)


def patch(request: Request, key: bytes) -> Response:
    """The edit: 404 no row, 403 a queue not editable, 428 / 412 the ETag, 400 the body
    or a refused change, 200 the row after it with its new ETag."""
    value = edits.row_value(key)
    if value is None:
        raise exceptions.NotFound("No row with that key.")
    queue = keys.queue_of(key)
    refusal = edits.queue_refusal(queue)
    if refusal is not None:
        raise exceptions.PermissionDenied(refusal.message)
    header = request.headers.get("If-Match")
    if not header or header.strip() == "*":
        raise PreconditionRequired()
    etag = next((tag for tag in edits.etags_of(key, value) if matches(header, tag)), None)
    if etag is None:
        raise PreconditionFailed()
    try:
        msg = edits.editable_message(value)
    except edits.EditRefused as exc:
        raise exceptions.ValidationError({"key": [str(exc)]}) from None
    given = MessageEditSerializer(data=request.data)
    given.is_valid(raise_exception=True)
    _refuse_redacted(msg, queue, dict(given.validated_data), request)
    try:
        done = edits.edit_msg(
            key,
            edited(msg, dict(given.validated_data)),
            expected=etag,
            actor=_actor(request),
            held=inflight.in_hand,
            user=request.user,
        )
    except edits.EditRefused as exc:
        raise exceptions.ValidationError({exc.field or "non_field_errors": [str(exc)]}) from None
    except edits.EditConflict as exc:
        raise PreconditionFailed(str(exc)) from None
    found = edits.tagged_row(key)
    if found is None:  # delivered or deleted since the edit committed
        raise exceptions.NotFound("The message was edited, then delivered or deleted.")
    row, etag = found
    data = dict(RowSerializer(row, context=viewer(request)).data)
    data["changed"] = ChangeSerializer(done.changes, many=True).data
    return Response(data, headers={"ETag": quoted(etag)})


def _refuse_redacted(msg: Message, queue: str, given: dict[str, Any], request: Request) -> None:
    """403 for a change to a value the user may not see (`edits.masked_fields`)."""
    shown = redaction.redacted(msg, queue, reveal=redaction.reveals(request.user))
    masked = edits.masked_fields(msg, shown)
    named = [name for name in given if name != "extra"]
    named += [f"extra.{name}" for name in given.get("extra", {})]
    hidden = [name for name in named if name in masked]
    if hidden:
        raise exceptions.PermissionDenied(
            f"Redacted (DEADLETTER_REDACT): {', '.join(hidden)}; changing a value needs the "
            "view_unredacted_queuedmessage permission."
        )


def _actor(request: Request) -> str:
    return str(request.user.get_username())
