"""The archive's endpoints: list what left the queues other than by delivery
(`GET archive/`, newest first a page at a time from a cursor, `queue.archive_pages`),
read the newest entry of a key (`GET archive/{key}/`, its attempts with it), and
put it back in its queue (`POST archive/{key}/restore/`, `archive.restore`).

Reading needs `deadletter.view_archivedmessage`, restoring
`deadletter.restore_archivedmessage`, as in the admin. A restore writes into a
queue as a park does, so `DEADLETTER_API_QUEUES` applies to it as to a park.
Queue access applies too: the list holds the entries of the queues it lets the
user see, an entry of another queue is a 404 as a missing one is, and a restore
needs its `retry` grant.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from django.urls import reverse
from django.utils.decorators import method_decorator
from django.utils.http import urlencode
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema_field
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from deadletter import drain
from deadletter.api.base import DeadletterView, openapi
from deadletter.api.fields import NO_NUL, KeyField, QueueNameField, TextField, query_data
from deadletter.api.permissions import require, scope
from deadletter.api.serializers import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    AttemptSerializer,
    ErrorSerializer,
    MessageSerializer,
    api_queue_refusal,
    key_of,
    shown_attempts,
    shown_messages,
    viewer,
)
from deadletter.api.views import BAD, KEY, REFUSALS
from deadletter.conf import conf
from deadletter.models import ArchivedMessage, QueuedMessage
from deadletter.queue import archive, archive_pages, browse, limits, redaction
from deadletter.queue.archive_pages import Cursor, Filters
from deadletter.wire import codec, keys

READ = {"GET": archive.VIEW, "HEAD": archive.VIEW, "OPTIONS": archive.VIEW}

Entry = ArchivedMessage | archive.Archived


def row_of(entry: Entry) -> browse.Row:
    """The entry's bytes as the row they were: decoded unless too large
    (`DEADLETTER_MAX_ROW_BYTES`), None messages when they do not decode."""
    key, value = bytes(entry.key), bytes(entry.value or b"")
    if browse.is_too_large(key, len(value)):
        return browse.Row(key, None, len(value), too_large=True)
    try:
        msgs: list[Any] | None = codec.decode(value)
    except codec.CodecError:
        msgs = None
    return browse.Row(key, msgs, len(value))


class ArchivedSerializer(serializers.Serializer):
    """One archive entry: the row as it left its queue (`messages` empty and
    `corrupt` true for one that does not decode), why, by whom, when, and until
    when the archive keeps it (`kept_until`, null: for ever)."""

    id = serializers.IntegerField(help_text="The entry's id: a key archived twice has two.")
    key = KeyField()
    queue = serializers.CharField()
    reason = serializers.ChoiceField(choices=ArchivedMessage.Reason.values)
    actor = serializers.CharField(help_text="The user who deleted it, or drain.")
    archived_at = serializers.SerializerMethodField()
    kept_until = serializers.SerializerMethodField()
    last_error = serializers.SerializerMethodField(
        help_text="The message's LastError when it left (redacted values it quotes masked)."
    )
    corrupt = serializers.SerializerMethodField()
    too_large = serializers.SerializerMethodField()
    size = serializers.SerializerMethodField()
    messages = serializers.SerializerMethodField()

    def to_representation(self, instance: Any) -> Any:
        self._row = row_of(instance)
        return super().to_representation(instance)

    @extend_schema_field({"type": "string", "format": "date-time"})
    def get_archived_at(self, entry: Entry) -> str:
        return _utc(entry.archived_at)

    @extend_schema_field({"type": "string", "format": "date-time", "nullable": True})
    def get_kept_until(self, entry: Entry) -> str | None:
        kept = limits.archive_for(entry.queue)
        return None if kept is None else _utc(entry.archived_at + kept)

    @extend_schema_field({"type": "string"})
    def get_last_error(self, entry: Entry) -> str:
        reveal = bool(self.context.get("reveal", False))
        return redaction.scrubber(entry.queue, self._row.messages, reveal=reveal)(entry.last_error)

    def get_corrupt(self, entry: Entry) -> bool:
        return self._row.messages is None and not self._row.too_large

    @extend_schema_field({"type": "boolean"})
    def get_too_large(self, entry: Entry) -> bool:
        return self._row.too_large

    @extend_schema_field({"type": "integer"})
    def get_size(self, entry: Entry) -> int:
        return self._row.size

    @extend_schema_field(MessageSerializer(many=True))
    def get_messages(self, entry: Entry) -> list[Any]:
        return shown_messages(self._row.messages, entry.queue, self.context)


class ArchivedDetailSerializer(ArchivedSerializer):
    """An entry on its own, with its key's failed attempts oldest first (the
    history is kept by key, so they are the message's as it left)."""

    attempts_history = serializers.SerializerMethodField()

    @extend_schema_field(AttemptSerializer(many=True))
    def get_attempts_history(self, entry: Entry) -> list[Any]:
        return shown_attempts(bytes(entry.key), self._row.messages, entry.queue, self.context)


class ArchivePageSerializer(serializers.Serializer):
    results = ArchivedSerializer(many=True)
    next = serializers.URLField(allow_null=True, help_text="The next page; null on the last.")


@extend_schema_field({"type": "string", "pattern": NO_NUL})
class ActorField(TextField):
    """A user name: any text but a NUL."""


CURSOR_PATTERN = "^[0-9]{1,19}-[0-9]{1,19}$"
_LAST_MICROS = (datetime.max.replace(tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(
    microseconds=1
)
_LAST_ID = 2**63 - 1


@extend_schema_field({"type": "string", "pattern": CURSOR_PATTERN})
class CursorField(serializers.Field):
    """`<microseconds>-<id>`, as `next` gives it. Any such pair is a place in the
    archive's order: one past its last time or id is its end (the page starts at
    the newest entry), so every cursor the schema admits is answered."""

    def to_internal_value(self, data: Any) -> Cursor:
        text = data if isinstance(data, str) else ""
        if not re.fullmatch(CURSOR_PATTERN, text, re.ASCII):
            raise serializers.ValidationError(
                "not a cursor of the archive: <microseconds>-<id>, as `next` gives"
            )
        micros, _, ident = text.partition("-")
        try:
            return Cursor.parse(f"{min(int(micros), _LAST_MICROS)}-{min(int(ident), _LAST_ID)}")
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None


class ArchiveQuerySerializer(serializers.Serializer):
    """A page of the archive: the entries after `cursor` (newest first), at most
    `limit`, of `queue`, `reason` and `actor` when given. Reason and actor are looked
    for within `archive_pages.WINDOW` entries a page: a page may then hold fewer
    entries than `limit`, even none, and still have a `next`."""

    queue = QueueNameField(required=False, help_text="Entries of this queue only.")
    reason = serializers.ChoiceField(choices=ArchivedMessage.Reason.values, required=False)
    actor = ActorField(required=False, help_text="Entries by this user (or drain) only.")
    cursor = CursorField(required=False, help_text="Where the page starts: as `next` gives it.")
    limit = serializers.IntegerField(
        min_value=1, max_value=MAX_PAGE_SIZE, default=DEFAULT_PAGE_SIZE, required=False
    )

    def validate_actor(self, value: str) -> str:
        if "\x00" in value:
            raise serializers.ValidationError("A user name holds no NUL.")
        return value


class RestoredSerializer(serializers.Serializer):
    """Where a restore put the message: its live key, `moved` when that is a fresh
    key at the queue's tail (its own was taken again), `replaced` when it took its
    key back from another copy of the same message (now in the archive as edited)."""

    key = serializers.CharField()
    queue = serializers.CharField()
    moved = serializers.BooleanField()
    replaced = serializers.BooleanField()
    url = serializers.URLField()


class ArchiveList(DeadletterView):
    """The archive's entries newest first, a page at a time (`?cursor=`, the next
    page's URL in `next`), never counted."""

    permissions = READ

    @openapi(
        operation_id="archive_list",
        parameters=[ArchiveQuerySerializer],
        responses={200: ArchivePageSerializer, 400: BAD, **REFUSALS},
    )
    def get(self, request: Request) -> Response:
        query = ArchiveQuerySerializer(data=query_data(request))
        query.is_valid(raise_exception=True)
        asked = query.validated_data
        filters = Filters(
            queue=asked.get("queue"),
            reason=asked.get("reason"),
            actor=asked.get("actor"),
            within=scope(request),
        )
        found = archive_pages.page(filters, asked.get("cursor"), asked["limit"])
        next_url = None
        if found.next is not None:
            params = {name: asked[name] for name in ("queue", "reason", "actor") if name in asked}
            params.update(cursor=str(found.next), limit=str(asked["limit"]))
            path = reverse("deadletter-api:archive")
            next_url = request.build_absolute_uri(f"{path}?{urlencode(params)}")
        results = ArchivedSerializer(found.entries, many=True, context=viewer(request)).data
        return Response({"results": results, "next": next_url})


class ArchiveDetail(DeadletterView):
    """The newest archive entry of a key (an edited message's key has its original
    and perhaps itself later); 404 when the archive has none, or its queue is one
    your queue access does not let you see."""

    permissions = READ

    @openapi(
        operation_id="archive_retrieve",
        parameters=[KEY],
        responses={200: ArchivedDetailSerializer, 400: BAD, 404: ErrorSerializer, **REFUSALS},
    )
    def get(self, request: Request, key: str) -> Response:
        wanted = key_of(key)
        require(request, keys.queue_of(wanted), absent=NO_ENTRY)
        entry = archive.get_archived(wanted)
        if entry is None:
            raise NotFound(NO_ENTRY)
        require(request, entry.queue, absent=NO_ENTRY)
        return Response(ArchivedDetailSerializer(entry, context=viewer(request)).data)


LOCATION = OpenApiParameter(
    "Location",
    str,
    OpenApiParameter.HEADER,
    response=[201],
    description="The live message's URL (messages/{key}/).",
)


@method_decorator(drain.outside_request_transactions, name="dispatch")
class ArchiveRestore(DeadletterView):
    """Put the newest archive entry of a key back in its queue: 201 with the live
    key (its own, in its place in the order; or a fresh one at the tail, `moved`,
    when its own was taken again); 200 when the archive has none but the key is
    live (a restore already done: a repeated request); 404 when neither, or when
    its queue is one your queue access does not let you see (403: it shows the
    queue but grants no retry there)."""

    permissions = {**READ, "POST": archive.RESTORE}

    @openapi(
        operation_id="archive_restore",
        parameters=[KEY, LOCATION],
        request=None,
        responses={
            201: RestoredSerializer,
            200: OpenApiResponse(RestoredSerializer, description="Already live under this key."),
            400: BAD,
            404: ErrorSerializer,
            **REFUSALS,
        },
    )
    def post(self, request: Request, key: str) -> Response:
        wanted = key_of(key)
        require(request, keys.queue_of(wanted), archive.RESTORE_ACCESS, absent=NO_ENTRY)
        entry = archive.get_archived(wanted)
        if entry is None:
            if QueuedMessage.objects.using(conf.DATABASE).filter(key=wanted).exists():
                body = _restored(request, wanted, keys.queue_of(wanted), moved=False)
                return Response(body)
            raise NotFound(NO_ENTRY)
        require(request, entry.queue, archive.RESTORE_ACCESS, absent=NO_ENTRY)
        refusal = api_queue_refusal(entry.queue)
        if refusal is not None:
            raise ValidationError({"queue": [refusal.replace("park into", "restore into")]})
        try:
            restored = archive.restore(entry.id, actor=request.user.get_username())
        except archive.ArchiveError:
            raise NotFound("No archived message with that key (restored meanwhile).") from None
        body = _restored(
            request, restored.key, entry.queue, moved=restored.moved, replaced=restored.replaced
        )
        return Response(body, status=status.HTTP_201_CREATED, headers={"Location": body["url"]})


def _restored(
    request: Request, key: bytes, queue: str, *, moved: bool, replaced: bool = False
) -> Any:
    url = request.build_absolute_uri(
        reverse("deadletter-api:message", kwargs={"key": keys.to_text(key)})
    )
    return RestoredSerializer(
        {"key": keys.to_text(key), "queue": queue, "moved": moved, "replaced": replaced, "url": url}
    ).data


NO_ENTRY = "No archived message with that key."


def _utc(moment: datetime) -> str:
    """RFC 3339 in UTC, to the microsecond the database keeps."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


__all__ = ["ArchiveDetail", "ArchiveList", "ArchiveRestore"]
