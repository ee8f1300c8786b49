"""The demo project; its Celery app loads with Django, as Celery's Django guide says."""

from project.celery import app as celery_app

__all__ = ("celery_app",)
