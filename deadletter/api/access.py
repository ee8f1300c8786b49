"""What every API view shares: who may call it, how often, what it reads and
renders, and how failures answer.

Authentication and throttle classes follow the project's `REST_FRAMEWORK`, as
every DRF view does, with two differences: without `DEFAULT_AUTHENTICATION_CLASSES`
the API takes token and session, not DRF's session and Basic (a password on
every request); and its own throttles, rated by `DEADLETTER_API_THROTTLE_RATES`,
come on top, so failed authentications are slowed in any project. Parsers,
renderers and permissions are the API's own, the same everywhere.

Per-queue access (`queue.access`, the `QueueAccess` rows) is read here once a
request (`scope`) and enforced through `require`: a queue the user may not see
answers exactly as one that does not exist (404), so no name leaks; a queue
they see but may not act on that way is a 403.
"""

from __future__ import annotations

import base64
import hashlib
import json
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
from rest_framework.parsers import BaseParser
from rest_framework.permissions import BasePermission
from rest_framework.renderers import BaseRenderer, BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle, SimpleRateThrottle, UserRateThrottle
from rest_framework.views import APIView, exception_handler

from deadletter.api.converters import captured_utf8
from deadletter.api.serializers import max_message_bytes
from deadletter.conf import conf
from deadletter.exceptions import DeadletterError
from deadletter.queue import access
from deadletter.queue.access import Scope

logger = logging.getLogger("deadletter")

VIEW = "deadletter.view_queuedmessage"
ADD = "deadletter.add_queuedmessage"
DELETE = "deadletter.delete_queuedmessage"
DRAIN = "deadletter.drain_queuedmessage"


class ModelPermission(BasePermission):
    """The Django model permission the view names for the request's method;
    nothing for anonymous callers (401 with the first authentication class's
    challenge, the token's by default; 403 when that class has none, as in DRF)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        needed = view.permissions.get(request.method, VIEW)
        return bool(user.has_perm(needed))


def scope(request: Request) -> Scope:
    """The user's queue access for this request (`queue.access.scope_of`, memoised
    on the user object, so every view and helper of the request reads it once)."""
    return access.scope_of(request.user)


def require(request: Request, queue: str, action: str = "view", *, absent: str) -> None:
    """Nothing when the user may `action` on `queue`. Otherwise a 404 saying `absent`
    (the very answer of a missing queue, message or entry) when no grant lets them
    see the queue, and a 403 when they see it but `action` is not granted there."""
    granted = scope(request)
    if granted.allows(queue, action):
        return
    if action != "view" and granted.allows(queue, "view"):
        raise exceptions.PermissionDenied(
            f"Your queue access does not grant {action} on queue {queue!r}."
        )
    raise exceptions.NotFound(absent)


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


class ConfiguredRate:
    """A throttle rated by `DEADLETTER_API_THROTTLE_RATES[scope]` (None: off), in
    cache keys of its own, apart from the project's DRF throttles."""

    scope: ClassVar[str]
    cache_format = "deadletter-throttle-%(scope)s-%(ident)s"

    def get_rate(self) -> str | None:
        rate: str | None = conf.API_THROTTLE_RATES.get(self.scope)
        return rate


class FailedAuthThrottle(ConfiguredRate, SimpleRateThrottle):
    """Failed authentications (a wrong password or token) per client address: the
    connection's (`REMOTE_ADDR`), or with DRF's `NUM_PROXIES` set, the one its
    proxies append to X-Forwarded-For (`get_ident`). Past the rate a failure from the
    address is a 429 with Retry-After, but a request whose credential authenticates
    still gets through: clients behind one proxy share an address, and one of
    them guessing must not turn the others away (`FailedCredentialThrottle`
    bounds guessing a password)."""

    scope = "failed_auth"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}

    def get_ident(self, request: Request) -> str:
        """DRF without `NUM_PROXIES` takes the whole X-Forwarded-For as the client
        wrote it, a new address on every request for a guesser; the connection's
        address cannot be forged."""
        if api_settings.NUM_PROXIES is None:
            return str(request.META.get("REMOTE_ADDR") or "")
        return str(super().get_ident(request))

    def throttle_success(self) -> bool:
        return True  # only a failure counts: `record_failure`

    def wait(self) -> float:
        """Seconds until enough failures leave the window to be under the rate again."""
        return float(self.duration - (self.now - self.history[self.num_requests - 1]))

    def record_failure(self) -> None:
        """Count one failure, on the history read again (checking a password takes
        long enough for other requests to have failed meanwhile), keeping only
        the failures the rate looks at."""
        if self.rate is None or self.key is None:
            return
        now = self.timer()
        history = [t for t in self.cache.get(self.key, []) if t > now - self.duration]
        self.cache.set(self.key, [now, *history][: self.num_requests], self.duration)


class FailedCredentialThrottle(FailedAuthThrottle):
    """Failed authentications per credential, from any address, at the same rate:
    for Basic the user name (so a password is guessed no faster than the rate,
    and that user is held off meanwhile, the right password included), otherwise
    the whole `Authorization` header (a client repeating a wrong token). Past
    the rate the credential is a 429 before it is checked. A request without an
    `Authorization` header is not counted here."""

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        ident = credential_ident(request.META.get("HTTP_AUTHORIZATION", ""))
        if ident is None:
            return None
        return self.cache_format % {"scope": f"{self.scope}_credential", "ident": ident}


def credential_ident(header: str) -> str | None:
    """A digest naming what an `Authorization` header guesses at: a Basic user
    name, else the header itself; None without one."""
    if not header:
        return None
    material = header
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode("latin-1")
        except ValueError:
            pass
        else:
            material = "basic\0" + decoded.partition(":")[0]
    return hashlib.sha256(material.encode("utf-8", "surrogatepass")).hexdigest()


class UserThrottle(ConfiguredRate, UserRateThrottle):
    """Requests per user, after authentication and permissions (off by default:
    services park through the API, most of all during an incident)."""

    scope = "user"


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
