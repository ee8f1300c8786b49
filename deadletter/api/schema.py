"""The OpenAPI 3 schema of the API (drf-spectacular) and its docs page (Swagger UI
from drf-spectacular-sidecar: no CDN). The schema covers this API's views only,
at the paths where the project mounted them."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponseNotFound
from django.templatetags.static import static
from django.urls import NoReverseMatch, reverse
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.generators import EndpointEnumerator, SchemaGenerator
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.request import Request
from rest_framework.response import Response

from deadletter.api.base import DeadletterView

SCHEMA_SETTINGS: dict[str, Any] = {
    "TITLE": "deadletter API",
    "DESCRIPTION": "Park, list, drain and delete the messages of a dead-letter queue. "
    "Keys travel as lowercase hex; times as RFC 3339 with up to nine fraction digits.",
    "VERSION": "1",
    # Separate request and response shapes, so read-only fields are not asked for.
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "deadletter.api.schema.require_bodies",
    ],
}


def require_bodies(result: dict[str, Any], generator: Any, **kwargs: Any) -> dict[str, Any]:
    """Mark required the request bodies a view cannot do without (the methods in its
    `body_required`), which drf-spectacular leaves optional when no field of the
    body is required: the park takes a message whose every field may be left out,
    but not no message at all."""
    for path, _, method, view in getattr(generator, "endpoints", None) or ():
        if method not in getattr(getattr(view, "cls", None), "body_required", ()):
            continue
        body = result.get("paths", {}).get(path, {}).get(method.lower(), {}).get("requestBody")
        if body is not None:
            body["required"] = True
    return result


class DeadletterEndpoints(EndpointEnumerator):
    """Only this API's endpoints, whatever else the project's URLs serve, and each
    once: at its first mount when the project mounts the API twice."""

    def get_api_endpoints(self, patterns: Any = None, prefix: str = "") -> list[Any]:
        seen: set[tuple[type, str]] = set()
        kept = []
        for endpoint in super().get_api_endpoints(patterns, prefix):
            cls = getattr(endpoint[3], "cls", None)
            if cls is None or not issubclass(cls, DeadletterView) or not cls.in_schema:
                continue
            if (cls, endpoint[2]) in seen:
                continue
            if cls.__module__.startswith("deadletter.api."):
                seen.add((cls, endpoint[2]))
                kept.append(endpoint)
        return kept


class DeadletterSchemaGenerator(SchemaGenerator):
    """The schema of `DeadletterEndpoints`."""

    endpoint_inspector_cls = DeadletterEndpoints


class SchemaView(DeadletterView, SpectacularAPIView):
    """`schema/`: the OpenAPI 3 document (YAML, or JSON with `?format=json` or by Accept)."""

    generator_class = DeadletterSchemaGenerator
    in_schema = False
    custom_settings = SCHEMA_SETTINGS

    def get_renderers(self) -> Any:
        return [renderer() for renderer in SpectacularAPIView.renderer_classes]


class DocsView(DeadletterView, SpectacularSwaggerView):
    """`schema/docs/`: Swagger UI over the schema, served from the sidecar's static files."""

    url_name = "deadletter-api:schema"
    in_schema = False
    title = SCHEMA_SETTINGS["TITLE"]

    def get_renderers(self) -> Any:
        return [renderer() for renderer in SpectacularSwaggerView.renderer_classes]

    def permission_denied(self, request: Request, message: Any = None, code: Any = None) -> None:
        """A browser that is not logged in goes to the login page and comes back
        here after it; an API client gets the 401 and its token challenge."""
        if request.user.is_authenticated or "text/html" not in request.headers.get("Accept", ""):
            super().permission_denied(request, message=message, code=code)
        raise _ToLogin(request.get_full_path())

    def handle_exception(self, exc: Exception) -> Any:
        if isinstance(exc, _ToLogin):
            return redirect_to_login(exc.next, _login_url())
        return super().handle_exception(exc)

    def get(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        missing = [
            app
            for app in ("drf_spectacular", "drf_spectacular_sidecar")
            if not apps.is_installed(app)
        ]
        if missing:
            return HttpResponseNotFound(
                f"The API docs page needs {' and '.join(missing)} in INSTALLED_APPS.",
                content_type="text/plain",
            )
        response: Response = super().get(request, *args, **kwargs)
        return response

    def _get_schema_auth_names(self) -> list[str]:
        """The schemes Swagger UI may send when it fetches the schema: the API's
        authentication, not drf-spectacular's `SERVE_AUTHENTICATION`."""
        names: list[str] = []
        for authenticator in self.get_authenticators():
            scheme = OpenApiAuthenticationExtension.get_match(authenticator)
            if scheme is not None:
                names += [scheme.name] if isinstance(scheme.name, str) else scheme.name
        return names

    @staticmethod
    def _swagger_ui_resource(filename: str) -> str:
        return static(f"drf_spectacular_sidecar/swagger-ui-dist/{filename}")

    @staticmethod
    def _swagger_ui_favicon() -> str:
        return static("drf_spectacular_sidecar/swagger-ui-dist/favicon-32x32.png")


class _ToLogin(Exception):
    """The docs page's way from `permission_denied` to a redirect to the login page."""

    def __init__(self, next_url: str) -> None:
        super().__init__(next_url)
        self.next = next_url


def _login_url() -> str:
    """The admin's login page where the admin is mounted, else `LOGIN_URL`."""
    try:
        return reverse("admin:login")
    except NoReverseMatch:
        return str(settings.LOGIN_URL)
