"""System checks (`manage.py check`); every id is stable and never reused. One module
a job: `settings`, `database`, `api`, `drain`; `register` adds them all."""

from __future__ import annotations

from django.core import checks

from deadletter.checks.api import check_api_mount, check_api_proxy
from deadletter.checks.database import check_database_server
from deadletter.checks.drain import check_handlers, check_time_limits
from deadletter.checks.settings import check_settings

__all__ = [
    "check_api_mount",
    "check_api_proxy",
    "check_database_server",
    "check_handlers",
    "check_settings",
    "check_time_limits",
    "register",
]


def register() -> None:
    """Register the app's system checks; called from `DeadletterConfig.ready()`, so
    importing this module has no side effect (Django keeps a set: twice is once)."""
    checks.register(check_settings, "deadletter")
    checks.register(check_api_mount, "deadletter", checks.Tags.urls)
    checks.register(check_api_proxy, "deadletter", checks.Tags.urls, checks.Tags.security)
    checks.register(check_handlers, "deadletter")
    checks.register(check_time_limits, "deadletter")
    checks.register(check_database_server, "deadletter", checks.Tags.database)
