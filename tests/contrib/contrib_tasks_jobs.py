"""Tasks for the tests of deadletter.contrib.tasks: module-level, so that a
worker process and a drain import them by path like any real task."""

from __future__ import annotations

from pathlib import Path

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task  # type: ignore[no-redef]


class CauseNotFixed(RuntimeError):
    pass


@task
def flaky(fixed_flag: str, record: str, *, label: str = "") -> str:
    """Fails until the file `fixed_flag` exists, then records `label` in `record`."""
    if not Path(fixed_flag).exists():
        raise CauseNotFixed(f"{fixed_flag} is missing")
    with open(record, "a") as out:
        out.write(f"{label}\n")
    return label


@task
def succeeds() -> int:
    return 1


@task
def parks_another(fixed_flag: str, record: str) -> None:
    """Enqueues `flaky` (which fails on an Immediate backend) and succeeds itself."""
    flaky.enqueue(fixed_flag, record, label="inner")


@task
def fails_loudly(length: int) -> None:
    """Fails with an exception message of `length` characters on one line."""
    raise CauseNotFixed("x" * length)


not_a_task = "a module attribute that is no task"
