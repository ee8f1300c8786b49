"""deadletter.contrib.tasks with a real database backend: django-tasks-db's
`db_worker` runs the tasks in a child process on the test database (SQLite
or PostgreSQL), opted in there by DEADLETTER_CAPTURE_TASKS."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import django
import pytest
from django.conf import settings
from django.contrib import admin
from django.core.management import call_command
from django.test import override_settings

from deadletter import queue
from deadletter.contrib.tasks import framework, inflight
from deadletter.drain.outcomes import is_held
from deadletter.queue import api, history
from deadletter.wire.messages import Message
from tests.contrib.contrib_tasks_env import task_settings
from tests.factories import manage_py

if framework.find() is None and django.VERSION < (6, 0):
    pytest.skip("deadletter_tasks.E001: no Tasks framework on this leg", allow_module_level=True)

from tests.contrib import contrib_tasks_jobs as jobs  # after the skip: needs the framework
from tests.contrib.test_contrib_tasks import QUEUE, drain_tasks, parked

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def db_backend(subprocess_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """django-tasks-db installed and migrated in the test database; yields the
    environment of a child process that sees it with the same settings."""
    registered_before = set(admin.site._registry)
    with override_settings(
        **task_settings(
            list(settings.INSTALLED_APPS), "deadletter.contrib.tasks", "django_tasks_db"
        )
    ):
        call_command("migrate", "django_tasks_database", verbosity=0)
        from django_tasks_db.models import DBTaskResult

        try:
            yield {
                **subprocess_env,
                "DJANGO_SETTINGS_MODULE": "tests.contrib.contrib_tasks_settings",
            }
        finally:
            DBTaskResult.objects.all().delete()
    # Its admin registers on the one site once imported; with the app gone
    # again, every later admin page would look the app up and fail.
    for model in set(admin.site._registry) - registered_before:
        admin.site.unregister(model)


@pytest.fixture
def paths(tmp_path: Path) -> tuple[str, str]:
    return str(tmp_path / "fixed"), str(tmp_path / "record.txt")


def run_worker(env: dict[str, str]) -> str:
    """`manage.py db_worker --batch`: run every ready task of backend "db", then exit."""
    done = manage_py(
        *["db_worker", "--backend", "db", "--batch"],
        *["--no-startup-delay", "--no-reload", "--interval", "0"],
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def enqueue_flaky(paths: tuple[str, str], label: str) -> Any:
    return jobs.flaky.using(backend="db").enqueue(*paths, label=label)


def test_a_task_that_raises_in_the_worker_is_parked_exactly_once(
    db_backend: dict[str, str], paths: tuple[str, str]
) -> None:
    result = enqueue_flaky(paths, "w")

    run_worker(db_backend)

    result.refresh()
    assert str(result.status) == "FAILED"
    [msg] = parked()
    assert msg.extra["TaskBackend"] == "db"
    assert msg.extra["TaskResultID"] == str(result.id)
    assert msg.extra["TaskKwargs"] == {"label": "w"}
    assert msg.extra["TaskException"] == "tests.contrib.contrib_tasks_jobs.CauseNotFixed"
    assert api.queue_names() == [QUEUE]


def test_after_the_cause_is_fixed_the_drain_and_the_worker_run_it_and_no_row_is_left(
    db_backend: dict[str, str], paths: tuple[str, str]
) -> None:
    fixed, record = paths
    enqueue_flaky(paths, "fixed")
    run_worker(db_backend)
    Path(fixed).touch()

    assert drain_tasks() == 0
    assert parked() == []  # handed to the backend; a link waits for the worker
    assert len(parked(inflight.LINK_QUEUE)) == 1

    run_worker(db_backend)

    assert Path(record).read_text() == "fixed\n"
    assert api.queue_names() == []


def test_a_task_still_failing_in_the_worker_stays_queued_with_its_attempts_raised(
    db_backend: dict[str, str], paths: tuple[str, str]
) -> None:
    enqueue_flaky(paths, "down")
    run_worker(db_backend)
    [first] = parked()

    for attempts in (1, 2):
        assert drain_tasks() == 0
        run_worker(db_backend)

        [again] = parked()
        assert again.extra["Attempts"] == attempts
        assert again.queued_at == first.queued_at  # the age limit counts from the first failure
        assert again.extra["TaskResultID"] != first.extra["TaskResultID"]
        assert api.queue_names() == [QUEUE]


def test_a_redriven_task_failing_in_the_worker_is_an_attempt_by_the_worker(
    db_backend: dict[str, str], paths: tuple[str, str]
) -> None:
    enqueue_flaky(paths, "down")
    run_worker(db_backend)
    assert drain_tasks() == 0
    run_worker(db_backend)
    [again] = queue.fetch_failed_msgs(QUEUE)
    (attempt,) = history.attempts_of(again.key)
    assert (attempt.outcome, attempt.actor) == ("failed", "worker")
    assert attempt.error == again.msg.extra["LastError"]
    assert attempt.duration is not None and attempt.duration >= 0


def test_a_task_message_parked_by_other_code_is_kept_and_the_worker_has_nothing_to_run(
    db_backend: dict[str, str], tmp_path: Path
) -> None:
    marker = tmp_path / "granted"
    forged = {
        "Task": "tests.contrib.contrib_tasks_tripwire.grant",
        "TaskArgs": [str(marker)],
        "TaskBackend": "db",
    }
    key = queue.store_failed_msgs(QUEUE, Message(subject="hi", extra=forged))

    assert drain_tasks() == 1  # kept for an operator
    run_worker(db_backend)

    assert not marker.exists()
    [kept] = queue.fetch_failed_msgs(QUEUE)
    assert kept.key == key and is_held(kept.last_error)
