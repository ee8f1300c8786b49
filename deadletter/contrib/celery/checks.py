"""System checks of the Celery contrib app; its ids `deadletter_celery.*` are never reused."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.core import checks
from django.utils.module_loading import import_string

from deadletter.conf import conf


def check_celery(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """The two capture settings: a typo in either would park the wrong failures,
    found only after an incident."""
    errors: list[checks.CheckMessage] = []
    exclude = conf.CELERY_EXCLUDE
    if not isinstance(exclude, list | tuple) or not all(isinstance(n, str) for n in exclude):
        errors.append(
            checks.Error(
                f"DEADLETTER_CELERY_EXCLUDE must be a list of task names, got {exclude!r}.",
                hint="For example DEADLETTER_CELERY_EXCLUDE = ['billing.tasks.nightly_report'].",
                id="deadletter_celery.E001",
            )
        )
    kinds = conf.CELERY_EXCEPTIONS
    if kinds is None:
        return errors
    if not isinstance(kinds, list | tuple) or not all(isinstance(p, str) for p in kinds):
        problems = [f"must be None or a list of dotted paths, got {kinds!r}"]
    else:
        problems = [p for p in map(_exception_problem, kinds) if p is not None]
    errors += [
        checks.Error(
            f"DEADLETTER_CELERY_EXCEPTIONS {problem}.",
            hint="List exception classes by dotted path, e.g. ['requests.ConnectionError'], "
            "or leave it unset to park every failure.",
            id="deadletter_celery.E002",
        )
        for problem in problems
    ]
    return errors


def _exception_problem(path: str) -> str | None:
    try:
        found = import_string(path)
    except ImportError as exc:
        return f"names {path!r}, which does not import: {exc}"
    if not (isinstance(found, type) and issubclass(found, BaseException)):
        return f"names {path!r}, which is not an exception class"
    return None
