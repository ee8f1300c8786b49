"""A drain in a child process, the handler it runs, and who holds row locks:
shared by the command's tests, the time-limit tests and the scale-out tests."""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.db import connection

from deadletter import NeedsOperator
from deadletter.wire.messages import Message
from tests.factories import REPO, TABLE


def other_sessions_holding_locks() -> list[tuple[Any, ...]]:
    """The other sessions of this database that hold a lock in the queue table (an
    open claim transaction, say): one row each, empty when none does."""
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            cursor.execute(
                "SELECT t.trx_mysql_thread_id, t.trx_state FROM information_schema.INNODB_TRX t "
                "JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id "
                "WHERE p.DB = DATABASE() AND t.trx_mysql_thread_id <> CONNECTION_ID() "
                "AND (t.trx_rows_locked > 0 OR t.trx_tables_locked > 0)"
            )
        else:
            cursor.execute(
                "SELECT a.pid, a.state FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid "
                "WHERE l.relation = %s::regclass AND a.pid <> pg_backend_pid()",
                [TABLE],
            )
        return list(cursor.fetchall())


def recording_handler(msg: Message) -> Message | None:
    """Delivers to one recipient per call (`fields` lists them, `skip_recipients`
    the ones reached), recording `pid subject:recipient` durably in
    $DRAIN_RECORD before returning. A line is added to $DRAIN_IN_HAND on entry,
    $DRAIN_GATE is waited for, $DRAIN_PAUSE adds a random pause of up to that
    many seconds; $DRAIN_NO_FSYNC skips the fsync (a write survives SIGKILL of
    its process anyway)."""
    if in_hand := os.environ.get("DRAIN_IN_HAND"):
        with open(in_hand, "a") as marker:
            marker.write(f"{msg.subject}\n")
    if gate := os.environ.get("DRAIN_GATE"):
        while not Path(gate).exists():
            time.sleep(0.01)
    if pause := os.environ.get("DRAIN_PAUSE"):
        time.sleep(random.uniform(0, float(pause)))
    done = msg.skip_recipients or []
    todo = [r for r in (msg.fields or ["-"]) if r not in done]
    fd = os.open(os.environ["DRAIN_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{os.getpid()} {msg.subject}:{todo[0]}\n".encode())
        if not os.environ.get("DRAIN_NO_FSYNC"):
            os.fsync(fd)
    finally:
        os.close(fd)
    if len(todo) > 1:
        return msg.replace(skip_recipients=[*done, todo[0]])
    return None


def needs_operator_handler(msg: Message) -> None:
    """Keeps every message for an operator, as a redrive that cannot find its task does."""
    raise NeedsOperator(f"task for {msg.subject} is unknown here")


class Drain:
    """`manage.py deadletter_drain` in a child process, with `handler` (a dotted
    path, this module's `recording_handler` by default) on queue "q"."""

    def __init__(
        self,
        env: dict[str, str],
        tmp: Path,
        *args: str,
        handler: str = "tests.drain.drain_harness.recording_handler",
        **extra: str,
    ) -> None:
        self.record = tmp / "record.txt"
        self.in_hand = tmp / "in-hand"
        self.gate = tmp / "gate"
        self.stderr = tmp / f"stderr-{time.monotonic_ns()}.txt"
        self.stdout = tmp / f"stdout-{time.monotonic_ns()}.txt"
        settings_module = "drain_settings_" + handler.replace(".", "_")
        settings_file = tmp / f"{settings_module}.py"
        if not settings_file.exists():
            settings_file.write_text(
                "from project.settings import *  # noqa: F403\n"
                f"DEADLETTER_HANDLERS = {{'q': {handler!r}}}\n"
            )
        env = {
            **env,
            "PYTHONPATH": f"{REPO}:{tmp}",
            "DJANGO_SETTINGS_MODULE": settings_module,
            "DRAIN_RECORD": str(self.record),
            **extra,
        }
        with self.stdout.open("w") as out, self.stderr.open("w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "manage.py", "deadletter_drain", *args],
                cwd=REPO,
                env=env,
                stdout=out,
                stderr=err,
            )

    @classmethod
    def gated(cls, env: dict[str, str], tmp: Path, *args: str, **extra: str) -> Drain:
        """A drain whose handler writes each message it takes to `in_hand`, then
        waits for `gate` to exist before it delivers."""
        return cls(
            env,
            tmp,
            *args,
            DRAIN_IN_HAND=str(tmp / "in-hand"),
            DRAIN_GATE=str(tmp / "gate"),
            **extra,
        )

    def summary(self) -> dict[str, Any]:
        """The `--format json` summary (the first line of stdout)."""
        return json.loads(self.stdout.read_text().splitlines()[0])

    def wait(self) -> int:
        return self.proc.wait(timeout=60)

    def output(self) -> str:
        return self.stdout.read_text() + self.stderr.read_text()

    def wait_for(self, predicate: Any, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            assert self.proc.poll() is None or predicate(), self.output()
            assert time.monotonic() < deadline, self.output()
            time.sleep(0.005)


def recorded(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [line.split(" ", 1)[1] for line in path.read_text().splitlines() if " " in line]


def kill_once_recorded(drain: Drain, target: int, jitter: float, rng: random.Random) -> bool:
    """SIGKILL `drain` a random pause of up to `jitter` seconds after its record
    holds `target` deliveries; False when it ended first (the queue ran dry, which
    must be exit status 0)."""
    deadline = time.monotonic() + 30
    while len(recorded(drain.record)) < target and drain.proc.poll() is None:
        assert time.monotonic() < deadline, drain.output()
        time.sleep(0.001)
    time.sleep(rng.uniform(0, jitter))
    if drain.proc.poll() is not None:
        assert drain.wait() == 0, drain.output()
        return False
    drain.proc.kill()
    drain.proc.wait()
    return True


def assert_only_messages_in_hand_were_delivered_twice(
    deliveries: Counter[str], in_hand_at_kill: Counter[str]
) -> None:
    """At least once, and a second time only for a message a kill caught in hand."""
    duplicates = {d: n - 1 for d, n in deliveries.items() if n > 1}
    assert all(extra <= in_hand_at_kill[d] for d, extra in duplicates.items()), (
        duplicates,
        in_hand_at_kill,
    )


@contextlib.contextmanager
def claim_held_by_another_thread(queue: str) -> Iterator[bytes]:
    """The first row of `queue` claimed by another thread, as another worker
    would, until the block ends; yields the claimed key."""
    from django.db import connections

    from deadletter.queue.claims import claiming

    held, release = threading.Event(), threading.Event()
    claimed: list[bytes] = []

    def hold() -> None:
        try:
            with claiming(queue) as item:
                claimed.append(item.key)
                held.set()
                release.wait(30)
        finally:
            connections.close_all()

    thread = threading.Thread(target=hold)
    thread.start()
    assert held.wait(30)
    try:
        yield claimed[0]
    finally:
        release.set()
        thread.join()
