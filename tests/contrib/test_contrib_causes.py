"""A failure parked with its `LastError` (a Celery task's, a Django task's, a user's
own) is grouped by its cause from the moment it is parked, as the drain groups a
failed attempt: the row's signature is written with it, so the overview counts
it and the admin's cause filter lists it before any drain has run."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import django
import pytest
from django.conf import settings
from django.test import override_settings
from django.utils.html import escape

from deadletter.contrib.tasks import framework
from deadletter.models import QueuedMessage
from deadletter.queue import store_failed_msgs
from deadletter.queue.causes import LAST_ERROR_KEY, signature_of
from deadletter.wire.messages import Message
from tests.contrib import celery_jobs
from tests.contrib.contrib_tasks_env import task_settings

pytestmark = pytest.mark.django_db(transaction=True)

OVERVIEW = "/admin/deadletter/queuedmessage/overview/"
CHANGELIST = "/admin/deadletter/queuedmessage/"


def assert_grouped(admin_client: Any, queue: str, last_error: str) -> None:
    """The row holds the cause of `last_error`; the overview counts it, the filter lists it."""
    cause = signature_of(last_error)
    assert cause is not None
    assert list(QueuedMessage.objects.values_list("signature", flat=True)) == [cause]
    overview = admin_client.get(OVERVIEW).content.decode()
    assert f'title="{escape(cause)}">1 × ' in overview
    listing = admin_client.get(CHANGELIST, {"queue": queue}).content.decode()
    assert urlencode({"cause": cause}) in listing  # a choice of the cause filter
    filtered = admin_client.get(CHANGELIST, {"queue": queue, "cause": cause}).content.decode()
    assert "0 message rows on this page" not in filtered
    assert "1 message row on this page" in filtered


def test_a_captured_celery_task_is_grouped_by_the_cause_of_its_last_error(
    admin_client: Any, tmp_path: Path
) -> None:
    record = str(tmp_path / "record.txt")
    celery_jobs.flaky.apply(args=(str(tmp_path / "fixed"), record), kwargs={"label": "a"})
    assert_grouped(admin_client, "celery.celery", "ConnectionError: endpoint down for a")


@pytest.mark.skipif(
    framework.find() is None and django.VERSION < (6, 0),
    reason="deadletter_tasks.E001: no Tasks framework on this leg",
)
def test_a_captured_django_task_is_grouped_by_the_cause_of_its_last_error(
    admin_client: Any, tmp_path: Path
) -> None:
    from tests.contrib import contrib_tasks_jobs as jobs  # needs the framework: after the skip

    fixed = str(tmp_path / "fixed")
    with override_settings(
        **task_settings(list(settings.INSTALLED_APPS), "deadletter.contrib.tasks")
    ):
        jobs.flaky.enqueue(fixed, str(tmp_path / "record.txt"))
        error = f"tests.contrib.contrib_tasks_jobs.CauseNotFixed: {fixed} is missing"
        assert_grouped(admin_client, "tasks.default", error)


def test_a_message_a_site_parks_with_its_own_last_error_is_grouped_by_its_cause(
    admin_client: Any,
) -> None:
    error = "HTTPError: HTTP Error 503: Service Unavailable"
    store_failed_msgs("webhooks", Message(subject="order 7", extra={LAST_ERROR_KEY: error}))
    assert_grouped(admin_client, "webhooks", error)
