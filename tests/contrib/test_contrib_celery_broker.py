"""Dead letters for Celery against a real broker (RabbitMQ, and Redis as a second
transport) and a real worker process: parked once after the last retry, nothing
for a success, redriven by `manage.py deadletter_drain` to a worker that runs it
with the same arguments, and a worker killed mid-task parks it once.

Each test has its own Celery queue, so runs side by side never share one; the
brokers' URLs come from the environment (`tests.contrib.brokers`). A broker
that is down skips these tests on a developer's machine and fails them in CI
(`DEADLETTER_REQUIRE_BROKERS` set by .ci/run), where both run."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from deadletter.contrib.celery import capture
from deadletter.queue import fetch_failed_msgs
from deadletter.wire.messages import Message
from tests.contrib.brokers import BROKERS, reachable
from tests.factories import REPO

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

_numbers = itertools.count()


@pytest.fixture(params=sorted(BROKERS))
def broker(request: pytest.FixtureRequest) -> str:
    return reachable(request.param)


@pytest.fixture
def celery_queue() -> str:
    return f"dl-test-{os.getpid()}-{next(_numbers)}"


class Worker:
    """`celery -A project worker` in a child process on one queue of `broker`,
    with this test's database and the test tasks."""

    def __init__(self, env: dict[str, str], broker: str, celery_queue: str, log: Path) -> None:
        self.log = log
        with log.open("a") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable, "-m", "celery", "-A", "project", "worker",
                    "-Q", celery_queue, "--pool", "solo", "-I", "tests.contrib.celery_jobs",
                    "--without-gossip", "--without-mingle", "--without-heartbeat",
                    "-l", "INFO", "-n", f"{celery_queue}@%h",
                ],
                cwd=REPO,
                env={**env, "CELERY_BROKER_URL": broker},
                stdout=out,
                stderr=subprocess.STDOUT,
            )  # fmt: skip

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def start_worker(
    subprocess_env: dict[str, str], broker: str, celery_queue: str, tmp_path: Path
) -> Iterator[Callable[[], Worker]]:
    started: list[Worker] = []

    def start() -> Worker:
        worker = Worker(subprocess_env, broker, celery_queue, tmp_path / "worker.log")
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture
def client(broker: str, celery_queue: str) -> Iterator[Callable[..., str]]:
    """Send a task by name to the test's queue, as the project's code would."""
    app = Celery("client", broker=broker)

    def send(name: str, *args: Any, **kwargs: Any) -> str:
        return str(
            app.send_task(f"tests.contrib.celery_jobs.{name}", args, kwargs, queue=celery_queue).id
        )

    yield send
    app.close()


def wait_for(predicate: Callable[[], Any], log: Path, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = predicate()
        if found:
            return found
        assert time.monotonic() < deadline, log.read_text() if log.exists() else "no log"
        time.sleep(0.1)


def runs(record: Path) -> list[str]:
    return record.read_text().splitlines() if record.exists() else []


def parked(name: str) -> list[Message]:
    return [item.msg for item in fetch_failed_msgs(name)]


def drain(
    env: dict[str, str], tmp_path: Path, broker: str, name: str
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "redrive_settings.py").write_text(
        "from project.settings import *  # noqa: F403\n"
        "CELERY_IMPORTS = ['tests.contrib.celery_jobs']  # Celery's own setting; never imported\n"
        f"DEADLETTER_HANDLERS = {{{name!r}: 'deadletter.contrib.celery.redrive'}}\n"
    )
    return subprocess.run(
        [sys.executable, "manage.py", "deadletter_drain", "--queue", name, "--format", "json"],
        cwd=REPO,
        env={
            **env,
            "CELERY_BROKER_URL": broker,
            "PYTHONPATH": f"{REPO}:{tmp_path}",
            "DJANGO_SETTINGS_MODULE": "redrive_settings",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_failing_task_is_parked_once_and_redriven_to_a_worker_with_its_arguments(
    start_worker: Callable[[], Worker],
    client: Callable[..., str],
    celery_queue: str,
    broker: str,
    subprocess_env: dict[str, str],
    tmp_path: Path,
) -> None:
    worker = start_worker()
    record, fixed = tmp_path / "record.txt", tmp_path / "fixed"
    name = capture.queue_for(celery_queue)
    task_id = client("flaky", str(fixed), str(record), label="order-7")
    (msg,) = wait_for(lambda: parked(name), worker.log)
    assert runs(record) == [f"order-7 retries={n} original=None" for n in range(3)]
    assert msg.extra[capture.TASK_ID] == task_id
    assert msg.extra[capture.TASK_ARGS] == [str(fixed), str(record)]
    assert msg.extra[capture.TASK_KWARGS] == {"label": "order-7"}
    assert (msg.extra[capture.TASK_QUEUE], msg.extra[capture.TASK_RETRIES]) == (celery_queue, 2)
    assert msg.extra[capture.TASK_HOSTNAME].startswith(celery_queue)

    client("succeeds", str(tmp_path / "ok.txt"))
    wait_for(lambda: runs(tmp_path / "ok.txt"), worker.log)

    fixed.touch()
    result = drain(subprocess_env, tmp_path, broker, name)
    assert result.returncode == 0, result.stderr
    assert '"delivered": 1' in result.stdout
    wait_for(lambda: len(runs(record)) == 4, worker.log)
    assert runs(record)[-1] == f"order-7 retries=0 original={task_id}"
    time.sleep(1)  # a success parks nothing, late or not
    assert parked(name) == []


def test_a_worker_killed_mid_task_parks_the_task_once_when_it_fails_after_the_restart(
    start_worker: Callable[[], Worker],
    client: Callable[..., str],
    celery_queue: str,
    broker: str,
    tmp_path: Path,
) -> None:
    if broker.startswith("redis"):
        pytest.skip("Redis hands an unacknowledged task back after its visibility timeout (1 h)")
    record, marker = tmp_path / "record.txt", tmp_path / "started"
    first = start_worker()
    client("slow_then_fails", str(marker), str(record))
    wait_for(lambda: runs(record) == ["start"], first.log)
    first.proc.kill()
    first.proc.wait()
    second = start_worker()
    name = capture.queue_for(celery_queue)
    wait_for(lambda: parked(name), second.log)
    time.sleep(2)  # nothing more comes
    assert runs(record) == ["start", "start"]
    assert len(parked(name)) == 1


def test_integers_beyond_64_bits_come_back_to_the_worker_as_the_same_integers(
    start_worker: Callable[[], Worker],
    client: Callable[..., str],
    celery_queue: str,
    broker: str,
    subprocess_env: dict[str, str],
    tmp_path: Path,
) -> None:
    worker = start_worker()
    record, fixed = tmp_path / "record.txt", tmp_path / "fixed"
    numbers = [2**64, -(2**70), 10**30, 2**63 - 1]
    client("keeps_numbers", str(fixed), str(record), numbers, big=2**100 + 1)
    wait_for(lambda: parked(capture.queue_for(celery_queue)), worker.log)

    fixed.touch()
    result = drain(subprocess_env, tmp_path, broker, capture.queue_for(celery_queue))

    assert result.returncode == 0 and '"delivered": 1' in result.stdout, result.stdout
    wait_for(lambda: len(runs(record)) == 2, worker.log)
    assert runs(record) == [repr((numbers, 2**100 + 1))] * 2
