"""A process that parks outside any request (a worker, a consumer, a script)
reconnects after its database session was lost: the park outside the caller's
transaction retries once on a fresh connection, the park inside one fails loudly
and the next one succeeds. A park that succeeds costs no statement more
(`tests/store/test_sql.py::test_a_store_is_one_statement_and_a_dequeue_one`)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection, transaction

from deadletter.queue import QueueingError, dequeue
from deadletter.store import detached
from tests.backends import backend_id, kill, server_db
from tests.factories import REPO, park, parked

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("server_db"),
    pytest.mark.slow,  # sessions killed on a server
]

__all__ = ["server_db"]


def test_a_park_after_its_session_was_killed_reconnects_and_succeeds() -> None:
    park("before")
    kill(backend_id(connection))
    park("after")
    assert parked() == ["before", "after"]


def test_a_park_in_the_callers_transaction_fails_loudly_and_the_next_one_reconnects() -> None:
    with transaction.atomic():
        park("first")
        private = detached.private_connection(connection)
    kill(backend_id(private))
    with transaction.atomic(), pytest.raises(QueueingError):
        park("lost")
    with transaction.atomic():
        park("next")
    assert parked() == ["first", "next"]


def test_a_dequeue_after_its_session_was_killed_fails_and_the_next_one_reconnects() -> None:
    first, second = park("first", "second")
    kill(backend_id(connection))
    assert not dequeue(first)
    assert dequeue(first) and dequeue(second)
    assert parked() == []


PARKER = """
import os, sys, time
from pathlib import Path

import django

django.setup()
from django.db import connection

from deadletter import Message, QueueingError, store_failed_msgs
from tests.backends import backend_id

control = Path(sys.argv[1])
failed = 0
for i in range(int(sys.argv[2])):
    if i == int(sys.argv[3]):
        (control / "backend").write_text(str(backend_id(connection)))
        while not (control / "killed").exists():
            time.sleep(0.01)
    try:
        store_failed_msgs("q", Message(subject=f"m{i:03d}"))
    except QueueingError as exc:
        failed += 1
        print(exc, file=sys.stderr)
print(f"failed={failed}")
sys.exit(1 if failed else 0)
"""


def test_a_long_lived_parker_keeps_parking_after_its_session_is_killed(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    script = tmp_path / "parker.py"
    script.write_text(PARKER)
    parker = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path), "100", "50"],
        cwd=REPO,
        env=subprocess_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "backend").exists():
            assert parker.poll() is None and time.monotonic() < deadline, parker.communicate()
            time.sleep(0.01)
        kill(int((tmp_path / "backend").read_text()))
        (tmp_path / "killed").touch()
        out, err = parker.communicate(timeout=60)
    finally:
        if parker.poll() is None:
            parker.kill()
            parker.wait()
    assert parker.returncode == 0, out + err
    assert parked() == [f"m{i:03d}" for i in range(100)]
