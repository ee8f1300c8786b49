"""Settings of the child processes of the tasks tests (db_worker, drain): the
demo project plus django-tasks-db, opted in by setting rather than app entry."""

from project.settings import *  # noqa: F403
from project.settings import DEADLETTER_HANDLERS, INSTALLED_APPS
from tests.contrib.contrib_tasks_env import IMMEDIATE_BACKEND, TASK_APPS

INSTALLED_APPS = [*INSTALLED_APPS, *TASK_APPS, "django_tasks_db"]
DEADLETTER_CAPTURE_TASKS = True
TASKS = {
    "default": {"BACKEND": IMMEDIATE_BACKEND},
    "db": {"BACKEND": "django_tasks_db.DatabaseBackend"},
}
DEADLETTER_HANDLERS = {**DEADLETTER_HANDLERS, "tasks.default": "deadletter.contrib.tasks.redrive"}
