"""System checks of the tasks contrib app; ids `deadletter_tasks.*` are stable and never reused."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.core import checks

from deadletter.contrib.tasks import framework


def check_framework(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """Capturing failed tasks needs a Tasks framework; without one nothing is parked."""
    if framework.find() is not None:
        return []
    return [
        checks.Error(
            "Dead letters for tasks are enabled, but there is no Tasks framework: "
            "this Django has no django.tasks and the django-tasks backport is not installed.",
            hint="Use Django 6.0 or later, or `pip install django-tasks`; or remove "
            "'deadletter.contrib.tasks' / DEADLETTER_CAPTURE_TASKS.",
            id="deadletter_tasks.E001",
        )
    ]
