"""`POST queues/{name}/drain/`: one bounded drain of one queue, answered with its report."""

from __future__ import annotations

from django.utils.decorators import method_decorator
from drf_spectacular.utils import OpenApiResponse
from rest_framework import exceptions, status
from rest_framework.request import Request
from rest_framework.response import Response

from deadletter import drain
from deadletter.api.base import DeadletterView, openapi
from deadletter.api.parsers import ParsedBody
from deadletter.api.permissions import DRAIN, require
from deadletter.api.serializers import (
    DrainReportSerializer,
    DrainRequestSerializer,
    ErrorSerializer,
)
from deadletter.api.views import BAD, HIDDEN, NAME, NO_QUEUE, REFUSALS, valid_name
from deadletter.conf import conf


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "Another drain holds this queue."
    default_code = "drain_locked"


@method_decorator(drain.outside_request_transactions, name="dispatch")
class QueueDrain(DeadletterView):
    """Hand up to `limit` messages of the queue to its handler, as
    `manage.py deadletter_drain --queue NAME --limit N` does, and answer the
    report. Each message's outcome commits on its own, never in the request's
    transaction. The drain stops after `DEADLETTER_API_TIME_BUDGET` seconds
    (`stopped_by` "time budget"): a handler still running then is given up on
    and its message stays queued, the attempt counted. 409 when a drain
    already holds the queue (SQLite allows one at a time) or the queue has no
    handler in `DEADLETTER_HANDLERS` (the request is well formed: the site's
    configuration is what refuses it); 404 for a queue your queue access does
    not let you see, 403 for one it shows but grants no retry on."""

    permissions = {"POST": DRAIN}

    @openapi(
        parameters=[NAME],
        request=DrainRequestSerializer,
        responses={
            200: DrainReportSerializer,
            400: BAD,
            404: HIDDEN,
            409: OpenApiResponse(
                ErrorSerializer,
                description="Another drain holds the queue, or the queue has no handler.",
            ),
            **REFUSALS,
        },
    )
    def post(self, request: Request, name: str) -> Response:
        require(request, valid_name(name), "retry", absent=NO_QUEUE)
        body = request.data if isinstance(request.data, ParsedBody) else {}
        asked = DrainRequestSerializer(data=dict(body))
        asked.is_valid(raise_exception=True)
        try:
            drainer = drain.Drainer(
                [name],
                drain.DrainOptions(
                    limit=asked.validated_data["limit"],
                    budget=conf.API_TIME_BUDGET,
                    ignore_backoff=asked.validated_data["ignore_backoff"],
                ),
            )
            report = drainer.run()
        except drain.DrainConfigError as exc:
            raise Conflict(str(exc), code="no_handler") from None
        except drain.DrainLocked as exc:
            raise Conflict(str(exc)) from None
        return Response(DrainReportSerializer(report.as_dict()).data)
