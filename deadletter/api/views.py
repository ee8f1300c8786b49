"""The queue's endpoints: thin edges over `reports.summaries` and `queue.browse` (reads),
`queue.store_failed_msgs` (park) and `archive.discard` (delete: the message kept in
the archive, unless its queue's archive is off).

Every read and act is limited to the queues the user's queue access grants
(`access.scope`, `access.require`); parking is not one of its actions, so it
keeps the model permission and `DEADLETTER_API_QUEUES` alone."""

from __future__ import annotations

import time
from typing import Any

from django.urls import reverse
from django.utils.decorators import method_decorator
from django.utils.http import urlencode
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from deadletter import drain, queue
from deadletter.api import edits
from deadletter.api.base import DeadletterView, ServiceUnavailable, openapi
from deadletter.api.fields import KEY_PATTERN, query_data
from deadletter.api.parsers import ParsedBody
from deadletter.api.permissions import ADD, DELETE, require, scope
from deadletter.api.serializers import (
    ErrorSerializer,
    MessageRowSerializer,
    MessageSerializer,
    PageQuerySerializer,
    PageSerializer,
    ParkedSerializer,
    QueueNameSerializer,
    QueuePageQuerySerializer,
    QueueSerializer,
    RowSerializer,
    api_queue_refusal,
    key_of,
    viewer,
)
from deadletter.queue import browse, redaction, search
from deadletter.queue import edits as queue_edits
from deadletter.queue.archive import discard
from deadletter.reports import queues as queue_pages
from deadletter.reports import summaries
from deadletter.wire import keys

NAME = OpenApiParameter(
    "name",
    str,
    OpenApiParameter.PATH,
    description="The queue's name: any text of 1..255 UTF-8 bytes without NUL, "
    "'/' included (percent-encode what a URL path cannot hold).",
)
KEY = OpenApiParameter(
    "key",
    str,
    OpenApiParameter.PATH,
    description="A row key, lowercase hex (anything else is a 400 naming `key`).",
    pattern=KEY_PATTERN,
)
REFUSALS: dict[int, Any] = {
    401: OpenApiResponse(ErrorSerializer, description="Not authenticated."),
    403: OpenApiResponse(
        ErrorSerializer,
        description="Lacks the model permission, or the queue access grant of the action "
        "on a queue it lets you see.",
    ),
    429: OpenApiResponse(
        ErrorSerializer,
        description="Throttled (DEADLETTER_API_THROTTLE_RATES): wait Retry-After seconds.",
    ),
    503: OpenApiResponse(ErrorSerializer, description="The queue database failed."),
}
HIDDEN = OpenApiResponse(
    ErrorSerializer, description="No queue by that name that your queue access lets you see."
)
NO_QUEUE = "No queue by that name."
BAD = OpenApiResponse(
    {"type": "object", "additionalProperties": True},
    description="Invalid input; the body names each field and what is wrong with it.",
)


def valid_name(name: str) -> str:
    """The queue name of the URL, or a 400 naming `name`."""
    checked = QueueNameSerializer(data={"name": name})
    checked.is_valid(raise_exception=True)
    return name


NEXT_LINK = OpenApiParameter(
    "Link",
    str,
    OpenApiParameter.HEADER,
    response=[200],
    description='`<url>; rel="next"` (RFC 8288) when more queues follow this page.',
)


class QueueList(DeadletterView):
    """The queues holding a row, by name, a page at a time (`?after=<name>&limit=<n>`,
    the next page in the `Link` header): depth, oldest enqueued, oldest first
    failure, age of the oldest message. A page costs the same however many
    queues there are."""

    @openapi(
        parameters=[QueuePageQuerySerializer, NEXT_LINK],
        responses={200: QueueSerializer(many=True), 400: BAD, **REFUSALS},
    )
    def get(self, request: Request) -> Response:
        data = query_data(request)
        if data.get("after") == "":
            del data["after"]  # no name sorts before the empty one: the first page
        query = QueuePageQuerySerializer(data=data)
        query.is_valid(raise_exception=True)
        limit: int = query.validated_data["limit"]
        after: str | None = query.validated_data.get("after")
        granted = scope(request)
        if granted.unrestricted:
            page = queue_pages.page_after(after, limit)
            names, more = page.names, page.more_after
        else:
            names = granted.granted_names(limit + 1, after=after)
            names, more = names[:limit], len(names) > limit
        statuses = [summaries.queue_status(name) for name in names]
        context = {"now_ns": time.time_ns()}
        response = Response(QueueSerializer(statuses, many=True, context=context).data)
        if more:
            path = reverse("deadletter-api:queues")
            query_text = urlencode({"after": names[-1], "limit": str(limit)})
            response["Link"] = f'<{request.build_absolute_uri(f"{path}?{query_text}")}>; rel="next"'
        return response


class QueueDetail(DeadletterView):
    """One queue's summary (depth 0 when it holds nothing); 404 for a queue your
    queue access does not let you see. A queue whose name ends in `/messages` or
    `/drain` is read from the queue list instead."""

    @openapi(parameters=[NAME], responses={200: QueueSerializer, 400: BAD, 404: HIDDEN, **REFUSALS})
    def get(self, request: Request, name: str) -> Response:
        require(request, valid_name(name), absent=NO_QUEUE)
        status_ = summaries.queue_status(name)
        return Response(QueueSerializer(status_, context={"now_ns": time.time_ns()}).data)


class MessageList(DeadletterView):
    """GET: a queue's rows oldest first, a page at a time by key (`?after=<key>&limit=<n>`:
    page 10,000 costs what page 1 does; 404 for a queue your queue access does not let
    you see). POST: park a message at the queue's tail (the model permission and
    `DEADLETTER_API_QUEUES` decide: parking is none of the queue access's actions)."""

    permissions = {"POST": ADD}
    body_required = frozenset({"POST"})

    @openapi(
        parameters=[NAME, PageQuerySerializer],
        responses={200: PageSerializer, 400: BAD, 404: HIDDEN, **REFUSALS},
    )
    def get(self, request: Request, name: str) -> Response:
        require(request, valid_name(name), absent=NO_QUEUE)
        query = PageQuerySerializer(data=query_data(request))
        query.is_valid(raise_exception=True)
        asked = dict(query.validated_data)
        after: bytes | None = asked.get("after")
        low, high = keys.queue_bounds(name)
        if after is not None and after >= high:  # a place past the queue: nothing after it
            return Response({"results": [], "next": None})
        if after is not None and after < low:  # a place before the queue: from its start
            del asked["after"]
        path = reverse("deadletter-api:messages", kwargs={"name": name})
        return _page(request, asked, name, path)

    @openapi(
        parameters=[NAME],
        request=MessageSerializer,
        responses={201: ParkedSerializer, 400: BAD, **REFUSALS},
    )
    def post(self, request: Request, name: str) -> Response:
        valid_name(name)
        refusal = api_queue_refusal(name)
        if refusal is not None:
            raise ValidationError({"name": [refusal]})
        body = request.data
        if not isinstance(body, ParsedBody):
            raise ValidationError({"payload": ["A JSON object (the message) is required."]})
        incoming = MessageSerializer(data=dict(body))
        incoming.is_valid(raise_exception=True)
        key = queue.store_failed_msgs(name, incoming.validated_data["message"])
        location = request.build_absolute_uri(
            reverse("deadletter-api:message", kwargs={"key": keys.to_text(key)})
        )
        parked = ParkedSerializer({"key": keys.to_text(key), "queue": name, "url": location})
        return Response(parked.data, status=status.HTTP_201_CREATED, headers={"Location": location})


class SearchList(DeadletterView):
    """GET: the rows of every queue in key order (queue by queue, each oldest first),
    a page at a time by key, those a search `?q=` matches when it is given; only
    the queues your queue access lets you see."""

    @openapi(
        operation_id="messages_search",
        parameters=[PageQuerySerializer],
        responses={200: PageSerializer, 400: BAD, **REFUSALS},
    )
    def get(self, request: Request) -> Response:
        query = PageQuerySerializer(data=query_data(request))
        query.is_valid(raise_exception=True)
        return _page(request, query.validated_data, None, reverse("deadletter-api:search"))


def _page(request: Request, asked: dict[str, Any], name: str | None, path: str) -> Response:
    """One page of rows after `asked["after"]`: the queue's (or every queue's), or
    the matches of `asked["q"]`; one row more than asked tells whether there is a
    next page, whose URL keeps the search."""
    after: bytes | None = asked.get("after")
    limit: int = asked["limit"]
    found: search.Query | None = asked.get("q")
    reveal = redaction.reveals(request.user)
    if found or name is None:
        # Across queues, a restricted user's search walks their granted key ranges only;
        # one queue's (`name`) was judged whole by `require`.
        try:
            row_keys, more = search.keys_page(
                found or search.parse(""),
                queue=name,
                after_key=after,
                size=limit,
                reveal=reveal,
                spans=scope(request).spans() if name is None else None,
            )
        except search.SearchTooCostly as exc:
            raise ValidationError({"q": [str(exc)]}) from None
        rows = browse.rows_of(row_keys)
    else:
        rows = browse.page_rows(name, after=after, limit=limit + 1)
        more = len(rows) > limit
        rows = rows[:limit]
    next_url = None
    if more and rows:
        params = {"after": keys.to_text(rows[-1].key), "limit": str(limit)}
        if found:
            params["q"] = found.text
        next_url = request.build_absolute_uri(f"{path}?{urlencode(params)}")
    results = RowSerializer(rows, many=True, context={"reveal": reveal}).data
    return Response({"results": results, "next": next_url})


@method_decorator(drain.outside_request_transactions, name="dispatch")
class MessageDetail(DeadletterView):
    """One row by key, with its `ETag`; DELETE removes it (into the archive, by the
    user): 204 removed, 404 not there, 503 when the database failed (the row then
    stays); PATCH edits it (`edits`). A row of a queue your queue access does not
    let you see is a 404 as a missing one is; one you see but may not delete (or
    edit) there, a 403."""

    permissions = {"DELETE": DELETE, "PATCH": queue_edits.PERMISSION}

    @openapi(
        parameters=[KEY, edits.ETAG],
        responses={200: MessageRowSerializer, 400: BAD, 404: ErrorSerializer, **REFUSALS},
    )
    def get(self, request: Request, key: str) -> Response:
        wanted = key_of(key)
        require(request, keys.queue_of(wanted), absent=NO_ROW)
        found = queue_edits.tagged_row(wanted)
        if found is None:
            raise NotFound(NO_ROW)
        row, etag = found
        data = MessageRowSerializer(row, context=viewer(request)).data
        return Response(data, headers={"ETag": edits.quoted(etag)})

    @openapi(
        parameters=[KEY, edits.IF_MATCH, edits.ETAG],
        request=edits.MessageEditSerializer,
        responses={200: edits.EditedRowSerializer, 400: BAD, **REFUSALS, **edits.RESPONSES},
    )
    def patch(self, request: Request, key: str) -> Response:
        wanted = key_of(key)
        require(request, keys.queue_of(wanted), queue_edits.ACCESS, absent=NO_ROW)
        return edits.patch(request, wanted)

    @openapi(
        parameters=[KEY],
        responses={204: None, 400: BAD, 404: ErrorSerializer, **REFUSALS},
    )
    def delete(self, request: Request, key: str) -> Response:
        wanted = key_of(key)
        require(request, keys.queue_of(wanted), "delete", absent=NO_ROW)
        outcome = discard(wanted, actor=request.user.get_username())
        if outcome is queue.Removal.ABSENT:
            raise NotFound(NO_ROW)
        if outcome is queue.Removal.FAILED:
            raise ServiceUnavailable("The delete failed in the database; the row stays.")
        return Response(status=status.HTTP_204_NO_CONTENT)


NO_ROW = "No row with that key."


__all__ = ["MessageDetail", "MessageList", "QueueDetail", "QueueList", "SearchList", "serializers"]
