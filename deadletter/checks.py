"""System checks (`manage.py check`); every id is stable and never reused."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.apps import AppConfig
from django.core import checks

from deadletter.conf import conf


@checks.register("deadletter")
def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    errors: list[checks.CheckMessage] = []
    age = conf.MAX_QUEUE_AGE
    if not isinstance(age, timedelta) or age <= timedelta(0):
        errors.append(
            checks.Error(
                f"DEADLETTER_MAX_QUEUE_AGE must be a positive timedelta, got {age!r}.",
                hint="For example DEADLETTER_MAX_QUEUE_AGE = timedelta(days=30).",
                id="deadletter.E001",
            )
        )
    errors.extend(_check_database())
    return errors


SUPPORTED_VENDORS = ("sqlite", "postgresql")


def _check_database() -> list[checks.CheckMessage]:
    """The queue's key is a binary primary key: SQLite and PostgreSQL index it,
    MySQL/MariaDB cannot (a BLOB primary key needs a prefix length)."""
    from django.db import connections

    alias = conf.DATABASE
    if alias not in connections.settings:
        return [
            checks.Error(
                f"DEADLETTER_DATABASE names {alias!r}, which is not in DATABASES.",
                hint="Use one of: " + ", ".join(repr(a) for a in connections.settings),
                id="deadletter.E006",
            )
        ]
    vendor = connections[alias].vendor
    if vendor not in SUPPORTED_VENDORS:
        return [
            checks.Error(
                f"The queue database {alias!r} is {vendor}; deadletter runs on SQLite "
                "and PostgreSQL only.",
                hint="Route the queue to a SQLite or PostgreSQL database with DEADLETTER_DATABASE.",
                id="deadletter.E007",
            )
        ]
    return []


_HANDLER_HINT = {
    "import": (
        "deadletter.E002",
        "Give the dotted path of a module-level callable that imports, "
        "e.g. 'myproject.handlers.post_webhook'.",
    ),
    "callable": (
        "deadletter.E003",
        "Point the path at a function or other callable handle(msg) -> Message | None.",
    ),
    "setting": (
        "deadletter.E004",
        "DEADLETTER_HANDLERS = {'queue-name': 'dotted.path.to.handler', ...}",
    ),
}


@checks.register("deadletter")
def check_handlers(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """Import every configured handler now, so a typo fails `manage.py check`
    and deploys, not the first drain after an incident."""
    from deadletter.drain import handler_problems

    errors: list[checks.CheckMessage] = []
    for problem in handler_problems(conf.HANDLERS):
        check_id, hint = _HANDLER_HINT[problem.kind]
        errors.append(checks.Error(f"{problem}.", hint=hint, id=check_id))
    attempts = conf.MAX_ATTEMPTS
    if attempts is not None and (
        not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 1
    ):
        errors.append(
            checks.Error(
                f"DEADLETTER_MAX_ATTEMPTS must be None or an int of at least 1, got {attempts!r}.",
                hint="Leave it unset to retry until the age limit, or set e.g. 10.",
                id="deadletter.E005",
            )
        )
    return errors
