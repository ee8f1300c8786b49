"""A Celery task parked and redriven in a site built as a newcomer builds it:
`django-admin startproject`, Celery's Django guide (`proj/celery.py` with
`app.autodiscover_tasks()`, the app loaded from `proj/__init__.py`, tasks in an
app's `tasks.py`, nothing imported by hand in settings), a real RabbitMQ worker,
and `manage.py deadletter_drain` in a fresh process, which registers no project
task until it loads the task modules as a worker does."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.contrib.brokers import reachable
from tests.factories import REPO
from tests.test_startproject import run

pytestmark = pytest.mark.slow

CELERY_APP = """import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")

app = Celery("proj")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
"""

PROJECT_INIT = """from .celery import app as celery_app

__all__ = ("celery_app",)
"""

TASKS = """from pathlib import Path

from celery import shared_task


@shared_task
def charge_card(order_id, fixed_flag, record):
    with open(record, "a") as out:
        out.write(f"charge {order_id}\\n")
    if not Path(fixed_flag).exists():
        raise ConnectionError("payment gateway down")
"""


def build_site(site: Path, broker: str, celery_queue: str) -> None:
    """startproject + startapp, then the Celery guide's three files and settings."""
    site.mkdir()
    assert run(site, "-m", "django", "startproject", "proj", ".").returncode == 0
    assert run(site, "manage.py", "startapp", "orders").returncode == 0
    (site / "proj" / "celery.py").write_text(CELERY_APP)
    (site / "proj" / "__init__.py").write_text(PROJECT_INIT)
    (site / "orders" / "tasks.py").write_text(TASKS)
    settings = site / "proj" / "settings.py"
    settings.write_text(
        settings.read_text().replace(
            "INSTALLED_APPS = [",
            'INSTALLED_APPS = [\n    "deadletter",\n    "deadletter.contrib.celery",\n'
            '    "orders",',
            1,
        )
        + f"\nCELERY_BROKER_URL = {broker!r}\n"
        f"CELERY_TASK_DEFAULT_QUEUE = {celery_queue!r}\n"
        f"DEADLETTER_HANDLERS = {{'celery.{celery_queue}': 'deadletter.contrib.celery.redrive'}}\n"
    )
    migrated = run(site, "manage.py", "migrate")
    assert migrated.returncode == 0, migrated.stderr


def rows(site: Path) -> int:
    with sqlite3.connect(site / "db.sqlite3") as db:
        ((count,),) = db.execute("SELECT COUNT(*) FROM deadletter_queuedmessage").fetchall()
    return int(count)


def wait_for(predicate: Callable[[], Any], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, log.read_text() if log.exists() else "no log"
        time.sleep(0.2)


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[Callable[[Path, str], Path]]:
    """Start `celery -A proj worker` in a site on its queue; returns its log."""
    started: list[subprocess.Popen[bytes]] = []

    def start(site: Path, celery_queue: str) -> Path:
        log = tmp_path / "worker.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_"))}
        env["PYTHONPATH"] = f"{site}:{REPO}"
        with log.open("a") as out:
            started.append(
                subprocess.Popen(
                    [
                        sys.executable, "-m", "celery", "-A", "proj", "worker",
                        "-Q", celery_queue, "--pool", "solo", "--without-gossip",
                        "--without-mingle", "--without-heartbeat", "-l", "INFO",
                        "-n", f"{celery_queue}@%h",
                    ],
                    cwd=site,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )  # fmt: skip
        return log

    yield start
    for proc in started:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_a_drain_in_a_fresh_process_redrives_an_autodiscovered_task_to_the_worker(
    tmp_path: Path, worker: Callable[[Path, str], Path]
) -> None:
    broker = reachable("rabbitmq")
    site, celery_queue = tmp_path / "site", f"dl-site-{os.getpid()}-{time.monotonic_ns()}"
    build_site(site, broker, celery_queue)
    record, fixed = tmp_path / "record.txt", tmp_path / "fixed"
    log = worker(site, celery_queue)
    sent = run(
        site,
        "manage.py",
        "shell",
        "-c",
        f"from orders.tasks import charge_card; charge_card.delay(7, {str(fixed)!r}, "
        f"{str(record)!r})",
    )
    assert sent.returncode == 0, sent.stderr
    wait_for(lambda: rows(site) == 1, log)

    fixed.touch()
    drained = run(
        site, "manage.py", "deadletter_drain", "--queue", f"celery.{celery_queue}", "--format",
        "json",
    )  # fmt: skip

    assert drained.returncode == 0, drained.stdout + drained.stderr
    assert '"delivered": 1' in drained.stdout
    wait_for(lambda: record.exists() and len(record.read_text().splitlines()) == 2, log)
    assert record.read_text() == "charge 7\ncharge 7\n"
    assert rows(site) == 0
