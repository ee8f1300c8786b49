"""Which Tasks framework is there: Django's own `django.tasks` (6.0+) or the
`django-tasks` backport; None when neither is, which the system check reports
rather than an import error at startup."""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

__all__ = ["FAILED", "Framework", "find"]

# The value of TaskResultStatus.FAILED in Django and in the backport alike.
FAILED = "FAILED"

CANDIDATES = ("django.tasks", "django_tasks")


@dataclasses.dataclass(frozen=True)
class Framework:
    """The few parts of the framework this app uses, from whichever package provides them."""

    package: str
    task_enqueued: Any
    task_finished: Any
    task_class: type[Any]
    immediate_backend: type[Any]
    invalid_task: type[Exception]


def find() -> Framework | None:
    """The first framework that imports, in the order of `CANDIDATES`."""
    for package in CANDIDATES:
        try:
            base = importlib.import_module(f"{package}.base")
            signals = importlib.import_module(f"{package}.signals")
            immediate = importlib.import_module(f"{package}.backends.immediate")
            exceptions = importlib.import_module(f"{package}.exceptions")
        except ImportError:
            continue
        return Framework(
            package=package,
            task_enqueued=signals.task_enqueued,
            task_finished=signals.task_finished,
            task_class=base.Task,
            immediate_backend=immediate.ImmediateBackend,
            # Django names it InvalidTask, the backport InvalidTaskError.
            invalid_task=getattr(exceptions, "InvalidTask", None) or exceptions.InvalidTaskError,
        )
    return None
