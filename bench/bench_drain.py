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
BENCH_DRAIN_ROWS (default 20,000), BENCH_WAITING_ROWS (default 100,000) and
BENCH_ROUNDS (default 5) override; DEBUG is off, as in production.
"""

from __future__ import annotations

import logging
import os
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from _setup import django_on_fresh_sqlite, raw_connection

ROWS = int(os.environ.get("BENCH_DRAIN_ROWS", "20000"))
WAITING = int(os.environ.get("BENCH_WAITING_ROWS", "100000"))
DUE = 100
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
QUEUE = "bench-drain"
TABLE = "deadletter_queuedmessage"


def nothing(msg: object) -> None:
    """The handler: delivers instantly."""


def main() -> None:
    # As in production: DEBUG's query log would time every statement of the drain.
    os.environ.setdefault("DJANGO_DEBUG", "0")
    path = django_on_fresh_sqlite("drain")
    logging.getLogger("deadletter").setLevel(logging.WARNING)

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


if __name__ == "__main__":
    main()
