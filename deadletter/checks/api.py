"""The checks of the REST API's mount: `rest_framework` installed (E008), and a proxy's
headers trusted without `NUM_PROXIES` (W004)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.core import checks
from django.urls import URLResolver

from deadletter.conf import conf


def check_api_mount(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """The API's views are Django REST framework views: mounted without the app
    installed, a browser gets a 500 (its templates are missing)."""
    from django.apps import apps

    if apps.is_installed("rest_framework"):
        return []
    if not _api_mounted():
        return []
    return [
        checks.Error(
            "deadletter.api.urls is mounted in ROOT_URLCONF but 'rest_framework' is not "
            "in INSTALLED_APPS.",
            hint="Add 'rest_framework' to INSTALLED_APPS (pip install djangorestframework), "
            "or remove the include of deadletter.api.urls.",
            id="deadletter.E008",
        )
    ]


def _api_mounted() -> bool:
    """Whether ROOT_URLCONF includes deadletter.api.urls; a URLconf that does not
    load is Django's own check to report, so it counts as not mounted here."""
    try:
        from django.urls import get_resolver

        return _includes(get_resolver().url_patterns, "deadletter.api.urls")
    except Exception:
        return False


PROXY_SETTINGS = ("SECURE_PROXY_SSL_HEADER", "USE_X_FORWARDED_HOST", "USE_X_FORWARDED_PORT")


def check_api_proxy(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """The API's failed-authentication throttle counts per client address: with
    `NUM_PROXIES`, the entry its proxies appended to X-Forwarded-For; without it,
    the connection's. A site that trusts a proxy's headers is behind one, where
    the connection's address is the proxy's, shared by every client."""
    from django.conf import settings

    trusted = [name for name in PROXY_SETTINGS if getattr(settings, name, None)]
    drf = getattr(settings, "REST_FRAMEWORK", None) or {}
    rates = conf.API_THROTTLE_RATES
    if (
        not trusted
        or drf.get("NUM_PROXIES") is not None
        or not isinstance(rates, dict)
        or rates.get("failed_auth") is None
    ):
        return []
    if not _api_mounted():
        return []
    return [
        checks.Warning(
            f"The site trusts a proxy's headers ({', '.join(trusted)}) but "
            "REST_FRAMEWORK['NUM_PROXIES'] is unset: the API's failed-authentication "
            "throttle then counts failures per connection address, the proxy's, so every "
            "client behind it shares one count (X-Forwarded-For, which a client can write, "
            "is read only with NUM_PROXIES).",
            hint="Set REST_FRAMEWORK['NUM_PROXIES'] to the number of proxies in front of "
            "the site that append to X-Forwarded-For (1 for one nginx or load balancer), "
            "or 0 if none does.",
            id="deadletter.W004",
        )
    ]


def _includes(patterns: Any, module: str) -> bool:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            urlconf = pattern.urlconf_name
            name = urlconf if isinstance(urlconf, str) else getattr(urlconf, "__name__", None)
            if name == module or _includes(pattern.url_patterns, module):
                return True
    return False
