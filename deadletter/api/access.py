"""What every API view shares: who may call it, what it reads and renders,
and how failures answer. Set on the views, not taken from the project's
`REST_FRAMEWORK` settings, so the API behaves the same in every project.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from django.apps import apps
from django.db import DatabaseError
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, status
from rest_framework.authentication import (
    BaseAuthentication,
    BasicAuthentication,
    SessionAuthentication,
    TokenAuthentication,
)
from rest_framework.parsers import BaseParser
from rest_framework.permissions import BasePermission
from rest_framework.renderers import BaseRenderer, BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView, exception_handler

from deadletter.api.serializers import max_message_bytes
from deadletter.exceptions import DeadletterError

logger = logging.getLogger("deadletter")

VIEW = "deadletter.view_queuedmessage"
ADD = "deadletter.add_queuedmessage"
DELETE = "deadletter.delete_queuedmessage"
DRAIN = "deadletter.drain_queuedmessage"


class ModelPermission(BasePermission):
    """The Django model permission the view names for the request's method;
    nothing for anonymous callers (401 with the token challenge)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        needed = view.permissions.get(request.method, VIEW)
        return bool(user.has_perm(needed))


class ParsedBody(dict[str, Any]):
    """A JSON object the parser read from a body (an empty body gives none)."""


class BoundedJSONParser(BaseParser):
    """JSON only, strictly (no NaN), and no more than `DEADLETTER_MAX_MESSAGE_BYTES`:
    bad bodies are a 400 naming `payload`, before anything is stored."""

    media_type = "application/json"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        limit = max_message_bytes()
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise exceptions.ValidationError(
                {"payload": [f"the body is over {limit} bytes (DEADLETTER_MAX_MESSAGE_BYTES)"]}
            )
        try:
            value = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise exceptions.ValidationError({"payload": [f"malformed JSON: {exc}"]}) from None
        if not isinstance(value, dict):
            raise exceptions.ValidationError(
                {"payload": [f"expected a JSON object, got {type(value).__name__}"]}
            )
        return ParsedBody(value)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class ServiceUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The queue database failed; try again later."
    default_code = "database_failed"


def handle_exception(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's answers, plus 503 when the queue's database failed (never a 500)."""
    if isinstance(exc, DatabaseError | DeadletterError) and not isinstance(
        exc, exceptions.APIException
    ):
        logger.error("API request failed on the database: %s: %s", type(exc).__name__, exc)
        exc = ServiceUnavailable()
    return exception_handler(exc, context)


_F = TypeVar("_F", bound=Callable[..., Any])


def openapi(**kwargs: Any) -> Callable[[_F], _F]:
    """`extend_schema` built on drf-spectacular's `AutoSchema` whatever the project's
    `DEFAULT_SCHEMA_CLASS` is (extend_schema builds on a function's `schema`)."""

    def decorate(method: _F) -> _F:
        method.schema = AutoSchema  # type: ignore[attr-defined]
        decorated: _F = extend_schema(**kwargs)(method)
        return decorated

    return decorate


class DeadletterView(APIView):
    """The API's base view: session, token and Basic authentication; one model
    permission per method; JSON in, JSON out (plus the browsable API when
    `rest_framework` is an installed app, since its templates live there)."""

    permission_classes = [ModelPermission]
    parser_classes = [BoundedJSONParser]
    schema = AutoSchema()
    # Method -> the permission it needs; methods not named need the view permission.
    permissions: ClassVar[dict[str, str]] = {}
    # Whether the OpenAPI schema lists the view (not the schema's own views).
    in_schema: ClassVar[bool] = True

    def get_authenticators(self) -> list[BaseAuthentication]:
        found: list[BaseAuthentication] = []
        if apps.is_installed("rest_framework.authtoken"):
            found.append(TokenAuthentication())
        found += [BasicAuthentication(), SessionAuthentication()]
        return found

    def get_renderers(self) -> list[BaseRenderer]:
        renderers: list[BaseRenderer] = [JSONRenderer()]
        if apps.is_installed("rest_framework"):
            renderers.append(BrowsableAPIRenderer())
        return renderers

    def get_exception_handler(self) -> Any:
        return handle_exception
