"""The redrives' endpoints: list and read the stored redrives with their progress,
plan one (`POST redrives/`, or only count it with `dry_run`), cancel one.

Thin edges over `drain.redrives`: the API plans and cancels, the drain service
(`deadletter_drain --forever`) or `deadletter_redrive --run ID` runs what is
planned. Planning and cancelling need `deadletter.redrive_queuedmessage` and
are each a `LogEntry` naming the user, in the redrive's admin History.

Queue access applies: the list holds the redrives of the queues it lets the user
see (another's is a 404 as a missing one is), and planning or cancelling needs its
`redrive` grant on the queue (and on the destination of a move). A plan for a
queue without that grant is a 400 on `queue` that does not say whether the queue
exists.
"""

from __future__ import annotations

from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema_field
from rest_framework import exceptions, serializers, status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from deadletter.api.base import DeadletterView, openapi
from deadletter.api.fields import Int64Field, QueueNameField, TextField, query_data
from deadletter.api.parsers import ParsedBody
from deadletter.api.permissions import require, scope
from deadletter.api.serializers import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, ErrorSerializer
from deadletter.api.views import BAD, REFUSALS
from deadletter.conf import conf
from deadletter.drain import redrives
from deadletter.drain.concurrency import MAX_CONCURRENCY
from deadletter.models import Redrive
from deadletter.queue.redaction import reveals
from deadletter.queue.search import qualifiers

ID = OpenApiParameter("id", int, OpenApiParameter.PATH, description="The redrive's id.")


@extend_schema_field({"type": "integer", "minimum": 1, "maximum": MAX_CONCURRENCY})
class ConcurrencyField(Int64Field):
    """Messages handed to the handler at once: a JSON integer (`plan_redrive` holds
    it to 1..MAX_CONCURRENCY, as the schema says)."""


@extend_schema_field({"type": "integer", "minimum": 1})
class StepField(Int64Field):
    """One step of a ramp: a JSON integer (above 0, `plan_redrive` says)."""


@extend_schema_field(
    {"type": "number", "format": "double", "minimum": 0, "exclusiveMinimum": True, "nullable": True}
)
class RateField(serializers.FloatField):
    """Messages a second: above 0, as `plan_redrive` holds it."""


@extend_schema_field(
    {
        "type": "number",
        "format": "double",
        "minimum": 0,
        "exclusiveMinimum": True,
        "maximum": redrives.MAX_STOP_AFTER,
        "nullable": True,
    }
)
class PercentField(serializers.FloatField):
    """A share in percent, above 0 and at most 100: the schema says the lower bound
    is exclusive, as `plan_redrive` holds it."""


class RedriveRequestSerializer(serializers.Serializer):
    """What `POST redrives/` asks for: `deadletter_redrive`'s options by name, as
    JSON types; their rules are `plan_redrive`'s (a 400 on the field it names)."""

    queue = QueueNameField(help_text="The queue whose messages are redriven.")
    search = TextField(required=False, default="", help_text=qualifiers.help_text())
    after = serializers.DateTimeField(
        required=False, allow_null=True, default=None, help_text="First failure at or after."
    )
    before = serializers.DateTimeField(
        required=False, allow_null=True, default=None, help_text="First failure before."
    )
    destination = QueueNameField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Move the messages into this queue (the command's --to), no handler "
        "called; null: hand each to its queue's handler.",
    )
    rate = RateField(
        required=False,
        allow_null=True,
        default=None,
        help_text="At most this many messages a second; null: no limit.",
    )
    ramp = serializers.ListField(
        child=StepField(),
        required=False,
        default=list,
        help_text="Step sizes to ramp up through, such as [1, 5, 20].",
    )
    stop_after = PercentField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Stop when more than this percentage of a step's messages fail again.",
    )
    ignore_backoff = serializers.BooleanField(required=False, default=False)
    concurrency = ConcurrencyField(required=False, default=1)
    dry_run = serializers.BooleanField(
        required=False, default=False, help_text="Count what matches (the plan); store nothing."
    )


class RedriveSerializer(serializers.Serializer):
    """A redrive with its progress, as the run writes it; `id` and `url` are null for
    a dry run's plan, which is not stored."""

    id = serializers.IntegerField(allow_null=True)
    url = serializers.SerializerMethodField()
    queue = serializers.CharField()
    search = serializers.CharField()
    after = serializers.DateTimeField(allow_null=True)
    before = serializers.DateTimeField(allow_null=True)
    destination = serializers.CharField(allow_null=True)
    rate = serializers.FloatField(allow_null=True)
    ramp = serializers.ListField(child=serializers.IntegerField())
    stop_after = serializers.FloatField(allow_null=True)
    ignore_backoff = serializers.BooleanField()
    concurrency = serializers.IntegerField()
    status = serializers.ChoiceField(choices=Redrive.Status.choices)
    reason = serializers.CharField(help_text="Why it stopped or failed, when it did.")
    started_by = serializers.CharField()
    matched = serializers.IntegerField(help_text="Messages the plan counted.")
    delivered = serializers.IntegerField()
    failed = serializers.IntegerField(help_text="Handed over and failed again (still parked).")
    dropped = serializers.IntegerField()
    moved = serializers.IntegerField()
    remaining = serializers.IntegerField()
    gone = serializers.IntegerField(
        help_text="Left: gone before the run reached them (delivered by a drain, deleted, "
        "edited or moved)."
    )
    held = serializers.IntegerField(help_text="Left: in another drain's hands.")
    waiting = serializers.IntegerField(help_text="Left: waiting on a backoff.")
    conflicts = serializers.IntegerField(help_text="Left: their key taken in the destination.")
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    heartbeat_at = serializers.DateTimeField(allow_null=True)

    @extend_schema_field({"type": "string", "format": "uri", "nullable": True})
    def get_url(self, redrive: Redrive) -> str | None:
        request = self.context.get("request")
        if redrive.pk is None or request is None:
            return None
        return request.build_absolute_uri(
            reverse(f"{request.resolver_match.namespace}:redrive", kwargs={"pk": redrive.pk})
        )


class RedrivePageQuerySerializer(serializers.Serializer):
    """A page of redrives, newest first: those older than id `after`, at most `limit`."""

    after = serializers.IntegerField(
        required=False, min_value=1, help_text="The last id of the previous page."
    )
    limit = serializers.IntegerField(
        min_value=1, max_value=MAX_PAGE_SIZE, default=DEFAULT_PAGE_SIZE, required=False
    )
    status = serializers.ChoiceField(
        choices=Redrive.Status.choices, required=False, help_text="Only redrives in this status."
    )


class RedrivePageSerializer(serializers.Serializer):
    results = RedriveSerializer(many=True)
    next = serializers.URLField(allow_null=True, help_text="The next page; null on the last.")


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The redrive is already over."
    default_code = "redrive_over"


NO_REDRIVE = "No redrive with that id."
NOT_GRANTED = "Not a queue your queue access lets you redrive."


def _found(request: Request, pk: str, action: str = "view") -> Redrive:
    """The redrive of the URL's id (kept as text, as the base view checks every
    captured value), or a 404 (also for a queue your queue access hides)."""
    redrive = (
        Redrive.objects.using(conf.DATABASE).filter(pk=int(pk)).first()
        if pk.isascii() and pk.isdigit() and len(pk) < 19
        else None
    )
    if redrive is None:
        raise NotFound(NO_REDRIVE)
    require(request, redrive.queue, action, absent=NO_REDRIVE)
    return redrive


class RedriveList(DeadletterView):
    """GET: the redrives, newest first, a page at a time (`?after=<id>&limit=<n>`,
    `?status=`). POST: plan one, answered with it (201); with `dry_run` only the
    plan, counted and not stored (200). The drain service runs a planned redrive."""

    permissions = {"POST": redrives.PERMISSION}

    @openapi(
        operation_id="redrives_list",
        parameters=[RedrivePageQuerySerializer],
        responses={200: RedrivePageSerializer, 400: BAD, **REFUSALS},
    )
    def get(self, request: Request) -> Response:
        query = RedrivePageQuerySerializer(data=query_data(request))
        query.is_valid(raise_exception=True)
        limit: int = query.validated_data["limit"]
        found = redrives.visible(scope(request)).order_by("-id")
        if "after" in query.validated_data:
            found = found.filter(id__lt=query.validated_data["after"])
        if "status" in query.validated_data:
            found = found.filter(status=query.validated_data["status"])
        # One more than asked tells whether there is a next page.
        page = list(found[: limit + 1])
        next_url = None
        if len(page) > limit:
            page = page[:limit]
            params = request.query_params.copy()
            params["after"] = str(page[-1].pk)
            params["limit"] = str(limit)
            next_url = request.build_absolute_uri(f"{request.path}?{params.urlencode()}")
        context = {"request": request}
        return Response(
            {"results": RedriveSerializer(page, many=True, context=context).data, "next": next_url}
        )

    @openapi(
        request=RedriveRequestSerializer,
        responses={
            201: RedriveSerializer,
            200: OpenApiResponse(RedriveSerializer, description="`dry_run`: the plan, unsaved."),
            400: BAD,
            **REFUSALS,
        },
    )
    def post(self, request: Request) -> Response:
        body = request.data
        if not isinstance(body, ParsedBody):
            raise ValidationError({"payload": ["A JSON object (the redrive) is required."]})
        asked = RedriveRequestSerializer(data=dict(body))
        asked.is_valid(raise_exception=True)
        options = asked.validated_data
        dry_run = options["dry_run"]
        granted = scope(request)
        for field, name in redrives.guarded(options):
            if not granted.allows(name, redrives.ACTION):
                raise ValidationError({field: [NOT_GRANTED]})
        try:
            redrive = redrives.plan_redrive(
                **redrives.inputs(options),
                started_by=request.user.get_username(),
                save=not dry_run,
                reveal=reveals(request.user),
                by=request.user,
                note="Planned through the API",
            )
        except redrives.RedriveError as exc:
            raise ValidationError({exc.field or "non_field_errors": [exc.message]}) from None
        shown = RedriveSerializer(redrive, context={"request": request}).data
        if dry_run:
            return Response(shown)
        headers = {"Location": shown["url"]}
        return Response(shown, status=status.HTTP_201_CREATED, headers=headers)


class RedriveDetail(DeadletterView):
    """One redrive and its progress: the counts the run has written so far."""

    @openapi(
        parameters=[ID],
        responses={200: RedriveSerializer, 400: BAD, 404: ErrorSerializer, **REFUSALS},
    )
    def get(self, request: Request, pk: str) -> Response:
        return Response(RedriveSerializer(_found(request, pk), context={"request": request}).data)


class RedriveCancel(DeadletterView):
    """Cancel a planned or running redrive: it stops before its next message (what it
    did stays done). 409 when it is already over."""

    permissions = {"POST": redrives.PERMISSION}

    @openapi(
        parameters=[ID],
        request=None,
        responses={
            200: RedriveSerializer,
            400: BAD,
            404: ErrorSerializer,
            409: OpenApiResponse(ErrorSerializer, description="The redrive is already over."),
            **REFUSALS,
        },
    )
    def post(self, request: Request, pk: str) -> Response:
        found = _found(request, pk, redrives.ACTION)
        try:
            redrive = redrives.cancel_redrive(
                found.pk, by=request.user, note="Cancelled through the API"
            )
        except redrives.RedriveError as exc:
            raise Conflict(exc.message) from None
        return Response(RedriveSerializer(redrive, context={"request": request}).data)
