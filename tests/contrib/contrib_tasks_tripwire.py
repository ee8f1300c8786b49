"""A module whose import is a side effect: it appends its name to the file
named by $DEADLETTER_TRIPWIRE, so a test can tell that something imported it;
and the task an attacker would like to run, which leaves a marker file."""

from __future__ import annotations

import os
from pathlib import Path

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task  # type: ignore[no-redef]

if os.environ.get("DEADLETTER_TRIPWIRE"):
    with Path(os.environ["DEADLETTER_TRIPWIRE"]).open("a") as out:
        out.write(f"{__name__}\n")


@task
def grant(marker: str) -> None:
    """What a forged message would have the drain run: it writes `marker`."""
    Path(marker).write_text("granted\n")
