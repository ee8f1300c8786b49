"""The demo project's Celery app, set up as Celery's Django guide says: settings
under `CELERY_`, tasks found in each app's `tasks` module. A worker:
`celery -A project worker`; the demo itself needs none (`demo_seed` runs its
failing task in-process)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

app = Celery("project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
