"""Scale-out on PostgreSQL and MySQL/MariaDB: SKIP LOCKED claims, worker processes,
SIGKILL, concurrent enqueue."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from deadletter.models import QueuedMessage
from deadletter.queue import api, fetch_failed_msgs
from deadletter.queue.claims import claim_failed_msg, claiming
from deadletter.wire import codec, keys
from deadletter.wire.messages import Message
from tests.drain.drain_harness import (
    REPO,
    Drain,
    assert_only_messages_in_hand_were_delivered_twice,
    claim_held_by_another_thread,
    recorded,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def server_db() -> None:
    if connection.vendor == "sqlite":
        pytest.skip("scale-out runs on PostgreSQL and MySQL/MariaDB; this run is on SQLite")


def bulk_park(queue: str, count: int) -> list[str]:
    """Park `count` messages in one statement per 1,000: setting up 10,000 rows
    one `store_failed_msgs` at a time would be most of a test's time."""
    queued_at = datetime.now(UTC) - timedelta(minutes=5)
    subjects = [f"{queue}-{i:05d}" for i in range(count)]
    rows = [
        QueuedMessage(
            key=keys.new_key(queue),
            value=codec.encode_one(Message(subject=s, queued_at=queued_at)),
        )
        for s in subjects
    ]
    QueuedMessage.objects.bulk_create(rows, batch_size=1000)
    return subjects


def remaining(queue: str = "q") -> int:
    low, high = keys.queue_bounds(queue)
    return QueuedMessage.objects.filter(key__gte=low, key__lt=high).count()


# --- claims ------------------------------------------------------------------------


def test_a_claimed_row_is_skipped_by_every_other_claim(server_db: None) -> None:
    bulk_park("q", 2)
    with claim_held_by_another_thread("q") as first, claiming("q") as item:
        second = item.key
    assert second != first


def test_a_claim_rolled_back_releases_the_row_untouched(server_db: None) -> None:
    bulk_park("q", 1)
    with pytest.raises(RuntimeError), claiming("q") as item:
        raise RuntimeError("worker died")
    with claiming("q") as again:
        assert again.key == item.key


def test_claim_outside_a_transaction_is_refused(server_db: None) -> None:
    from django.db.transaction import TransactionManagementError

    with pytest.raises(TransactionManagementError):
        claim_failed_msg("q")


def test_the_queue_range_scan_and_the_claim_use_the_primary_key_index(server_db: None) -> None:
    for name in ("a", "q", "z"):
        bulk_park(name, 5000)
    low, high = keys.queue_bounds("q")
    page = (api.page_sql(connection, True, 1000), (low, high))  # iter_failed_msgs' read
    with CaptureQueriesContext(connection) as ctx, claiming("q", after=low):
        pass
    (claim,) = [(q["sql"], ()) for q in ctx.captured_queries if "SKIP LOCKED" in q["sql"]]
    for sql, params in (page, claim):
        if connection.vendor == "mysql":
            assert_mysql_reads_the_primary_key_in_order(sql, params)
        else:
            assert_postgresql_reads_the_primary_key_in_order(sql, params)


def assert_postgresql_reads_the_primary_key_in_order(sql: str, params: tuple) -> None:
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE deadletter_queuedmessage")
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'deadletter_queuedmessage' "
            "AND indexdef LIKE '%%UNIQUE%%(key)'"
        )
        (pkey,) = cursor.fetchone()
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert f"Index Scan using {pkey}" in plan or f"Index Only Scan using {pkey}" in plan, plan
    assert "Seq Scan" not in plan and "Sort" not in plan, plan


def assert_mysql_reads_the_primary_key_in_order(sql: str, params: tuple) -> None:
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE TABLE deadletter_queuedmessage")
        cursor.fetchall()
        cursor.execute("EXPLAIN " + sql, params)
        columns = [c[0].lower() for c in cursor.description]
        (plan,) = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    assert plan["key"] == "PRIMARY" and plan["type"] == "range", plan
    assert "filesort" not in (plan["extra"] or ""), plan


# --- worker processes --------------------------------------------------------------


@pytest.mark.slow
def test_four_workers_deliver_ten_thousand_messages_each_exactly_once(
    server_db: None, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    subjects = bulk_park("q", 10_000)
    drain = Drain(
        subprocess_env, tmp_path, "--workers", "4", "--format", "json", DRAIN_NO_FSYNC="1"
    )
    assert drain.wait() == 0, drain.output()
    deliveries = Counter(recorded(drain.record))
    assert deliveries == Counter(f"{s}:-" for s in subjects)
    assert drain.summary()["delivered"] == 10_000
    assert remaining() == 0
    pids = {line.split()[0] for line in drain.record.read_text().splitlines()}
    assert len(pids) == 4


@pytest.mark.slow
def test_a_failing_message_is_tried_once_per_run_whatever_the_workers(
    server_db: None, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    bulk_park("q", 200)
    drain = Drain(
        subprocess_env, tmp_path, "--workers", "4", handler="tests.factories.failing_handler"
    )
    assert drain.wait() == 1
    attempts = Counter(q.msg.extra["Attempts"] for q in fetch_failed_msgs("q"))
    assert attempts == Counter({1: 200})


@pytest.mark.slow
def test_limit_is_shared_by_the_workers(
    server_db: None, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    bulk_park("q", 100)
    drain = Drain(subprocess_env, tmp_path, "--workers", "3", "--limit", "10")
    assert drain.wait() == 0
    assert (len(recorded(drain.record)), remaining()) == (10, 90)


@pytest.mark.slow
@pytest.mark.loops
def test_workers_killed_at_random_points_lose_nothing_and_duplicate_only_messages_in_hand(
    server_db: None, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    """Ten runs of `--workers 3`: in each, one worker is SIGKILLed at a random
    point, then a little later the parent and the rest. A worker records a
    delivery before its claim transaction commits, so the only delivery that
    may be recorded twice is the last one each killed worker recorded."""
    rng = random.Random(os.environ.get("DRAIN_CRASH_SEED", time.time_ns()))
    subjects = bulk_park("q", 500)
    expected = {f"{s}:-" for s in subjects}
    record = tmp_path / "record.txt"
    in_hand_at_kill: Counter[str] = Counter()

    def last_by(pid: int) -> str | None:
        lines = [x for x in record.read_text().splitlines() if x.startswith(f"{pid} ")]
        return lines[-1].split(" ", 1)[1] if lines else None

    def kill(worker: psutil.Process) -> None:
        with contextlib.suppress(psutil.NoSuchProcess):
            worker.send_signal(signal.SIGKILL)

    for _ in range(10):
        drain = Drain(subprocess_env, tmp_path, "--workers", "3", DRAIN_PAUSE="0.004")
        parent = psutil.Process(drain.proc.pid)
        target = len(recorded(record)) + rng.randint(3, 12)
        deadline = time.monotonic() + 30
        while len(recorded(record)) < target and drain.proc.poll() is None:
            assert time.monotonic() < deadline, drain.output()
            time.sleep(0.001)
        assert drain.proc.poll() is None, "the queue ran dry before the kill: " + drain.output()
        workers = parent.children()
        victim = rng.choice(workers)
        time.sleep(rng.uniform(0, 0.004))
        kill(victim)
        time.sleep(rng.uniform(0, 0.02))
        drain.proc.kill()
        for worker in workers:
            kill(worker)
        drain.proc.wait()
        psutil.wait_procs(workers, timeout=10)
        for worker in workers:
            if (line := last_by(worker.pid)) is not None:
                in_hand_at_kill[line] += 1
    print(f"deliveries recorded by the 10 runs: {len(recorded(record))} of {len(expected)}")
    assert remaining() > 0, "the kills came too late to test anything"
    for _ in range(5):
        if not remaining():
            break
        Drain(subprocess_env, tmp_path, "--workers", "2").wait()
    deliveries = Counter(recorded(record))
    assert remaining() == 0
    assert set(deliveries) == expected
    assert_only_messages_in_hand_were_delivered_twice(deliveries, in_hand_at_kill)


@pytest.mark.slow
def test_eight_processes_enqueue_at_once_without_error_or_loss(
    subprocess_env: dict[str, str],
) -> None:
    script = (
        "import sys, django; django.setup()\n"
        "from deadletter.wire.messages import Message\n"
        "from deadletter.queue import store_failed_msgs\n"
        "sys.stdin.read()\n"
        "for i in range(250):\n"
        "    store_failed_msgs('q', Message(subject=f'{sys.argv[1]}-{i}'))\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(n)],
            cwd=REPO,
            env=subprocess_env,
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(8)
    ]
    for proc in procs:  # all set up: let them write at once
        proc.stdin.close()
    errors = [proc.stderr.read() for proc in procs]
    assert [proc.wait(timeout=60) for proc in procs] == [0] * 8, errors
    subjects = [q.msg.subject for q in fetch_failed_msgs("q")]
    assert sorted(subjects) == sorted(f"{n}-{i}" for n in range(8) for i in range(250))


@pytest.mark.slow
def test_first_sigterm_to_a_workers_drain_lets_each_worker_finish_its_message(
    server_db: None, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    bulk_park("q", 20)
    drain = Drain.gated(subprocess_env, tmp_path, "--workers", "2")
    drain.wait_for(lambda: drain.in_hand.exists() and len(drain.in_hand.read_text().split()) == 2)
    drain.proc.send_signal(signal.SIGTERM)
    drain.wait_for(lambda: drain.output().count("stopping after the message in hand") == 3)
    drain.gate.touch()
    assert drain.wait() == 0, drain.output()
    assert len(recorded(drain.record)) == 2
    assert remaining() == 18
    assert "stopped early by SIGTERM" in drain.output()


@pytest.mark.slow
def test_second_sigterm_to_a_workers_drain_stops_at_once_leaving_rows_queued(
    server_db: None, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    bulk_park("q", 20)
    drain = Drain.gated(subprocess_env, tmp_path, "--workers", "2")
    drain.wait_for(drain.in_hand.exists)
    drain.proc.send_signal(signal.SIGTERM)
    drain.wait_for(lambda: "stopping after the message in hand" in drain.output())
    drain.proc.send_signal(signal.SIGTERM)
    assert drain.wait() == 128 + signal.SIGTERM, drain.output()
    assert recorded(drain.record) == []
    assert remaining() == 20
    assert all(q.msg.extra == {} for q in fetch_failed_msgs("q"))
