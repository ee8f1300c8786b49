"""Registered only once something loads the app's task modules, as a worker does."""

from celery import shared_task


@shared_task
def found_by_autodiscovery() -> str:
    return "found"
