"""What every API view shares: its base view (who may call it, how often, what it
reads and renders), how failures answer, and how it describes itself in the schema.

Authentication and throttle classes follow the project's `REST_FRAMEWORK`, as
every DRF view does, with two differences: without `DEFAULT_AUTHENTICATION_CLASSES`
the API takes token and session, not DRF's session and Basic (a password on
every request); and its own throttles (`api.throttles`), rated by
`DEADLETTER_API_THROTTLE_RATES`, come on top, so failed authentications are slowed
in any project. Parsers, renderers and permissions are the API's own, the same
everywhere.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from django.apps import apps
from django.conf import settings
from django.db import DatabaseError
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, status
from rest_framework.authentication import (
    BaseAuthentication,
    SessionAuthentication,
    TokenAuthentication,
)
from rest_framework.renderers import BaseRenderer, BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView, exception_handler

from deadletter.api.converters import captured_utf8
from deadletter.api.parsers import BoundedJSONParser
from deadletter.api.permissions import ModelPermission, answer
from deadletter.api.throttles import FailedAuthThrottle, FailedCredentialThrottle, UserThrottle
from deadletter.exceptions import DeadletterError
from deadletter.queue import access

__all__ = [
    "DeadletterView",
    "ServiceUnavailable",
    "authenticators",
    "handle_exception",
    "openapi",
]

logger = logging.getLogger("deadletter")


class ServiceUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The queue database failed; try again later."
    default_code = "database_failed"


def handle_exception(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's answers; a refusal of queue access raised below a view as `api.permissions`
    answers it; and 503 when the queue's database failed (never a 500)."""
    if isinstance(exc, access.Denied):
        exc = answer(exc)
    elif isinstance(exc, DatabaseError | DeadletterError) and not isinstance(
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


def authenticators() -> list[BaseAuthentication]:
    """The project's `DEFAULT_AUTHENTICATION_CLASSES` when it sets them, else token
    (with `rest_framework.authtoken` installed) and session: Basic only if the
    project asks for it. Read per request, so `override_settings` applies."""
    if "DEFAULT_AUTHENTICATION_CLASSES" in getattr(settings, "REST_FRAMEWORK", {}):
        return [cls() for cls in api_settings.DEFAULT_AUTHENTICATION_CLASSES]
    found: list[BaseAuthentication] = []
    if apps.is_installed("rest_framework.authtoken"):
        found.append(TokenAuthentication())
    found.append(SessionAuthentication())
    return found


class DeadletterView(APIView):
    """The API's base view: the authentication above; one model permission per
    method; the project's throttles and the API's own; JSON in, JSON out (plus the
    browsable API when `rest_framework` is an installed app, since its templates
    live there); a 400 for text captured from the URL that was not UTF-8."""

    permission_classes = [ModelPermission]
    parser_classes = [BoundedJSONParser]
    schema = AutoSchema()
    # Method -> the permission it needs; methods not named need the view permission.
    permissions: ClassVar[dict[str, str]] = {}
    # Whether the OpenAPI schema lists the view (not the schema's own views).
    in_schema: ClassVar[bool] = True

    def get_authenticators(self) -> list[BaseAuthentication]:
        return authenticators()

    def get_throttles(self) -> list[BaseThrottle]:
        return [cls() for cls in api_settings.DEFAULT_THROTTLE_CLASSES] + [UserThrottle()]

    def perform_authentication(self, request: Request) -> None:
        credential = FailedCredentialThrottle()
        if not credential.allow_request(request, self):
            request.authenticators = ()  # anonymous, the credentials unread
            super().perform_authentication(request)
            self.throttled(request, credential.wait())
        address = FailedAuthThrottle()
        address_over = not address.allow_request(request, self)
        try:
            super().perform_authentication(request)
        except exceptions.AuthenticationFailed:
            address.record_failure()
            credential.record_failure()
            if address_over:
                self.throttled(request, address.wait())
            raise

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        if kwargs and not captured_utf8(request, kwargs.values()):
            raise exceptions.ValidationError(
                {
                    field: [
                        "The URL is not UTF-8 once percent-decoded. Percent-encode the "
                        "UTF-8 bytes of the text, and a literal '%' as %25."
                    ]
                    for field in kwargs
                }
            )

    def get_renderers(self) -> list[BaseRenderer]:
        renderers: list[BaseRenderer] = [JSONRenderer()]
        if apps.is_installed("rest_framework"):
            renderers.append(BrowsableAPIRenderer())
        return renderers

    def get_exception_handler(self) -> Any:
        return handle_exception
