"""Where the Tasks framework comes from on this leg (Django's own, or the
backport on Django 5.2), shared by the tests and the child processes' settings."""

from __future__ import annotations

from importlib.util import find_spec

if find_spec("django.tasks") is not None:
    IMMEDIATE_BACKEND = "django.tasks.backends.immediate.ImmediateBackend"
    TASK_APPS: list[str] = []
else:
    IMMEDIATE_BACKEND = "django_tasks.backends.immediate.ImmediateBackend"
    TASK_APPS = ["django_tasks"]


def task_settings(installed_apps: list[str], *extra_apps: str) -> dict[str, object]:
    """Settings for `override_settings`: the Immediate backend as "default", the
    database backend as "db", and the redrive handler on queue tasks.default."""
    from django.conf import settings

    return {
        "INSTALLED_APPS": [*installed_apps, *TASK_APPS, *extra_apps],
        "TASKS": {
            "default": {"BACKEND": IMMEDIATE_BACKEND},
            "db": {"BACKEND": "django_tasks_db.DatabaseBackend"},
        },
        "DEADLETTER_HANDLERS": {
            **settings.DEADLETTER_HANDLERS,
            "tasks.default": "deadletter.contrib.tasks.redrive",
        },
    }
