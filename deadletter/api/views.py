"""Thin views over `inspection` (reads) and `queue.dequeue` (delete)."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from rest_framework import status
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from deadletter import inspection, keys, queue
from deadletter.api.serializers import row_data, summary_data


class QueueList(APIView):
    """Every queue with its row count and the age of the message at its head."""

    permission_classes = [IsAdminUser]

    def get(self, request: Request) -> Response:
        return Response([summary_data(s) for s in inspection.summarize_all()])


class QueueDetail(APIView):
    permission_classes = [IsAdminUser]

    def get(self, request: Request, name: str) -> Response:
        _valid_name(name)
        return Response(summary_data(inspection.summarize(name)))


class MessageList(APIView):
    """A queue's rows oldest first, a page at a time: `?after=<key>&limit=<n>`
    (keyset paging, so page 10,000 costs what page 1 does)."""

    permission_classes = [IsAdminUser]

    def get(self, request: Request, name: str) -> Response:
        _valid_name(name)
        limit = _int_param(request, "limit", default=50, low=1, high=inspection.MAX_PAGE)
        after = request.query_params.get("after")
        try:
            after_key = keys.from_text(after) if after else None
            rows = inspection.page_rows(name, after=after_key, limit=limit)
        except ValueError as exc:
            raise ValidationError({"after": str(exc)}) from exc
        next_url = None
        if len(rows) == limit:
            path = reverse("deadletter-api:messages", kwargs={"name": name})
            next_url = request.build_absolute_uri(
                f"{path}?after={keys.to_text(rows[-1].key)}&limit={limit}"
            )
        return Response({"results": [row_data(r) for r in rows], "next": next_url})


class MessageDetail(APIView):
    """One row by key; DELETE dequeues it (needs the delete permission)."""

    permission_classes = [IsAdminUser]

    def get(self, request: Request, key: bytes) -> Response:
        row = inspection.get_row(key)
        if row is None:
            raise NotFound("no row with that key")
        return Response(row_data(row))

    def delete(self, request: Request, key: bytes) -> Response:
        if not request.user.has_perm("deadletter.delete_queuedmessage"):
            raise PermissionDenied("deleting needs the deadletter.delete_queuedmessage permission")
        if inspection.get_row(key) is None:
            raise NotFound("no row with that key")
        queue.dequeue(key)
        return Response(status=status.HTTP_204_NO_CONTENT)


def _valid_name(name: str) -> None:
    try:
        keys.encode_queue_name(name)
    except ValueError as exc:
        raise ValidationError({"name": str(exc)}) from exc


def _int_param(request: Request, name: str, *, default: int, low: int, high: int) -> int:
    raw: Any = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValidationError({name: f"must be a whole number, got {raw!r}"}) from None
    if not low <= value <= high:
        raise ValidationError({name: f"must be between {low} and {high}, got {value}"})
    return value
