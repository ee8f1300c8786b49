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
    return errors
