"""A drain with a do-nothing handler against raw sqlite3 on the same file, and a
pass over a queue where nearly every message waits for its backoff.

The raw side does, per row, what a minimal drain must: BEGIN, SELECT the
oldest row of the queue, DELETE it, COMMIT. The app side is
`deadletter.drain.Drainer` (paged reads, CBOR decode, handler call, dequeue,
signals, counting). Rounds are interleaved and the best of each side kept,
so a noisy machine shifts both alike. Goal: app >= 0.5x raw throughput.

The waiting figure: a pass that hands over 100 due messages beside 100,000
that wait (a backoff's due time in the future), against the same pass with the
100 alone; median of interleaved rounds. Goal: at most 3x the time.
The concurrency figure: BENCH_SLOW_ROWS messages (default 1,000) to a handler
that waits 100 ms (`time.sleep`), drained with `concurrency` 32 against 1; the
run at 1 takes BENCH_SLOW_ONE_ROWS messages (default 100: 10 s, not 100), and
the output says so. Goal: at least 15x the throughput. Each run checks that
every message was delivered at least once, every outcome was recorded (the
report and `on_outcome` count each), and the queue is empty; it prints the counts.

BENCH_DRAIN_ROWS (default 20,000), BENCH_WAITING_ROWS (default 100,000) and
BENCH_ROUNDS (default 5) override; DEBUG is off, as in production. With
DATABASE_URL naming PostgreSQL or MySQL/MariaDB only the concurrency figure
runs, on a fresh database `<its database>_drain` of that server (the other two
are against raw sqlite3); BENCH_DRAIN_FIGURES=concurrency runs only it on SQLite.
"""

from __future__ import annotations

import logging
import os
import statistics
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from _setup import django_on_fresh_database, raw_connection

ROWS = int(os.environ.get("BENCH_DRAIN_ROWS", "20000"))
WAITING = int(os.environ.get("BENCH_WAITING_ROWS", "100000"))
DUE = 100
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
QUEUE = "bench-drain"
TABLE = "deadletter_queuedmessage"
SLOW_ROWS = int(os.environ.get("BENCH_SLOW_ROWS", "1000"))
SLOW_ONE_ROWS = int(os.environ.get("BENCH_SLOW_ONE_ROWS", "100"))
SLOW_SECONDS = 0.1
CONCURRENCY = 32
FIGURES = os.environ.get("BENCH_DRAIN_FIGURES", "")


def nothing(msg: object) -> None:
    """The handler: delivers instantly."""


slow_deliveries: list[str] = []
slow_lock = threading.Lock()


def slow(msg: Any) -> None:
    """The slow handler: an endpoint that takes 100 ms; notes each delivery."""
    time.sleep(SLOW_SECONDS)
    with slow_lock:
        slow_deliveries.append(msg.subject)


def main() -> None:
    # As in production: DEBUG's query log would time every statement of the drain.
    os.environ.setdefault("DJANGO_DEBUG", "0")
    vendor, path = django_on_fresh_database("drain")
    logging.getLogger("deadletter").setLevel(logging.WARNING)
    if vendor != "sqlite" or FIGURES == "concurrency":
        concurrency_figure(vendor)
        return

    from django.conf import settings

    from deadletter.drain import Drainer
    from deadletter.wire import codec, keys
    from deadletter.wire.gotime import GoTime
    from deadletter.wire.messages import Message

    settings.DEADLETTER_HANDLERS = {QUEUE: f"{__name__}.nothing"}
    value = codec.encode_one(
        Message(
            subject="Ocjena: Matematika",
            username="ucenik1@skole.hr",
            descriptions=["Datum", "Ocjena"],
            fields=["27.11.2026.", "5"],
            queued_at=GoTime.now(),
        )
    )
    raw = raw_connection(path)
    low, high = keys.queue_bounds(QUEUE)

    def fill() -> None:
        raw.execute("BEGIN")
        raw.executemany(
            f"INSERT INTO {TABLE} (key, value) VALUES (?, ?)",
            ((keys.new_key(QUEUE), value) for _ in range(ROWS)),
        )
        raw.execute("COMMIT")
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def app_round() -> float:
        fill()
        start = time.perf_counter()
        report = Drainer([QUEUE]).run()
        elapsed = time.perf_counter() - start
        assert report.delivered == ROWS, report
        return elapsed

    def raw_round() -> float:
        fill()
        select = f"SELECT key, value FROM {TABLE} WHERE key >= ? AND key < ? ORDER BY key LIMIT 1"
        delete = f"DELETE FROM {TABLE} WHERE key = ?"
        start = time.perf_counter()
        done = 0
        while True:
            raw.execute("BEGIN")
            row = raw.execute(select, (low, high)).fetchone()
            if row is None:
                raw.execute("COMMIT")
                break
            raw.execute(delete, (row[0],))
            raw.execute("COMMIT")
            done += 1
        elapsed = time.perf_counter() - start
        assert done == ROWS, done
        return elapsed

    app_t, raw_t = [], []
    for _ in range(ROUNDS):
        app_t.append(app_round())
        raw_t.append(raw_round())
    app_rate, raw_rate = ROWS / min(app_t), ROWS / min(raw_t)
    ratio = app_rate / raw_rate
    print(f"drain of {ROWS:,} messages, do-nothing handler, SQLite WAL, best of {ROUNDS} rounds")
    print(f"  deadletter_drain  {app_rate:9,.0f} msgs/s")
    print(f"  raw sqlite3       {raw_rate:9,.0f} msgs/s  (BEGIN, SELECT, DELETE, COMMIT per row)")
    print(f"  ratio             {ratio:9.2f}x  (goal >= 0.5x) {'OK' if ratio >= 0.5 else 'MISSED'}")
    waiting_figure(raw, value)
    concurrency_figure(vendor)


def waiting_figure(raw: object, value: bytes) -> None:
    """100 due messages drained beside `WAITING` that wait, against the 100 alone."""
    from django.conf import settings
    from django.db import connection

    from deadletter.drain import Drainer
    from deadletter.wire import keys

    settings.DEADLETTER_HANDLERS = {
        QUEUE: {"handler": f"{__name__}.nothing", "backoff": [3600, 3600]}
    }
    # Each waiting message due at its own time, as backoffs spread them: an hour on.
    soon = datetime.now(UTC) + timedelta(hours=1)
    due_times = [
        str((soon + timedelta(microseconds=37 * i)).replace(tzinfo=None)) for i in range(WAITING)
    ]

    def due_pass(waiting: bool) -> float:
        conn: Any = raw
        conn.execute("BEGIN")
        if waiting:
            conn.executemany(
                f"INSERT INTO {TABLE} (key, value, due_at) VALUES (?, ?, ?)",
                ((keys.new_key(QUEUE), value, due) for due in due_times),
            )
        conn.executemany(
            f"INSERT INTO {TABLE} (key, value) VALUES (?, ?)",
            ((keys.new_key(QUEUE), value) for _ in range(DUE)),
        )
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        connection.close()  # a pass starts as a drain from cron does: a fresh connection
        start = time.perf_counter()
        report = Drainer([QUEUE]).run()
        elapsed = time.perf_counter() - start
        assert report.delivered == DUE and report.waiting == (WAITING if waiting else 0), report
        conn.execute(f"DELETE FROM {TABLE}")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return elapsed

    alone, beside = [], []
    for _ in range(max(ROUNDS, 5)):
        alone.append(due_pass(False))
        beside.append(due_pass(True))
    ratio = statistics.median(beside) / statistics.median(alone)
    print(f"a pass handing over {DUE} due messages, SQLite WAL, median of {len(alone)} rounds")
    print(f"  {DUE} due alone                 {statistics.median(alone) * 1000:8.1f} ms")
    print(f"  beside {WAITING:,} waiting     {statistics.median(beside) * 1000:8.1f} ms")
    verdict = "OK" if ratio <= 3 else "MISSED"
    print(f"  ratio                         {ratio:8.2f}x  (goal <= 3x) {verdict}")


def concurrency_figure(vendor: str) -> None:
    """`SLOW_ROWS` messages to a 100 ms handler with `concurrency` 32, against
    `SLOW_ONE_ROWS` with concurrency 1; at least once and every outcome checked."""
    from django.conf import settings
    from django.db import connection

    from deadletter.drain import Drainer, DrainOptions, Outcome
    from deadletter.queue import store_failed_msgs
    from deadletter.wire.messages import Message

    settings.DEADLETTER_HANDLERS = {QUEUE: f"{__name__}.slow"}
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {TABLE}")

    def run(rows: int, concurrency: int) -> float:
        names = [f"slow-{concurrency}-{i:05d}" for i in range(rows)]
        for name in names:
            store_failed_msgs(QUEUE, Message(subject=name))
        slow_deliveries.clear()
        outcomes: list[Outcome] = []
        drainer = Drainer(
            [QUEUE],
            DrainOptions(concurrency=concurrency),
            on_outcome=outcomes.append,
            log_progress=False,
        )
        start = time.perf_counter()
        report = drainer.run()
        elapsed = time.perf_counter() - start
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT COUNT(*) FROM {TABLE}")
            (left,) = cursor.fetchone()
        missing = set(names) - set(slow_deliveries)
        twice = len(slow_deliveries) - len(set(slow_deliveries))
        recorded = outcomes.count(Outcome.DELIVERED)
        print(
            f"  concurrency {concurrency:>2}  {rows / elapsed:9,.1f} msgs/s  ({rows:,} messages in "
            f"{elapsed:.2f} s; delivered {len(set(slow_deliveries)):,} of {rows:,}, twice {twice}, "
            f"outcomes recorded {recorded:,} (report {report.handled:,}), left in the queue {left})"
        )
        assert not missing, f"{len(missing)} message(s) never delivered"
        assert report.delivered == rows == recorded == report.handled, (report, recorded)
        assert left == 0 and report.errors == 0, (left, report)
        return rows / elapsed

    print(
        f"a drain of messages to a handler that waits {SLOW_SECONDS * 1000:.0f} ms, {vendor}, "
        f"concurrency {CONCURRENCY} against 1 (one run each; 1 measured on "
        f"{SLOW_ONE_ROWS:,} messages, {CONCURRENCY} on {SLOW_ROWS:,})"
    )
    many = run(SLOW_ROWS, CONCURRENCY)
    one = run(SLOW_ONE_ROWS, 1)
    ratio = many / one
    verdict = "OK" if ratio >= 15 else "MISSED"
    print(f"  ratio          {ratio:9.2f}x  (goal >= 15x) {verdict}")


if __name__ == "__main__":
    main()
