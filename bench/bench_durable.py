"""Issue 44, point 10: durable parks on SQLite (`synchronous=FULL`), one at a time
and 100 to a transaction (`store_failed_msgs(queue, [...])`), against raw sqlite3
doing the same SQL on the same file in the same run.

Under FULL every commit waits for the disk (fsync of the WAL), so a park one at
a time is bounded by the disk's sync, whatever the code does; a list of 100
parked in one transaction pays that sync once. The run also times the disk's
sync itself (a 4 KB write and `fdatasync` in the same folder) and, for
reference, a park one at a time under `synchronous=NORMAL` (today's W001 hint),
which does not sync at commit. Rows:

  sync         write + fdatasync of 4 KB in BENCH_DIR        ms each, best and median
  full-1       store_failed_msgs(q, msg), FULL  vs raw INSERT + commit  parks/s, ratio
  full-100     store_failed_msgs(q, [100 msgs]), FULL vs raw BEGIN; executemany of
               100 INSERTs; COMMIT                                      parks/s, ratio
  normal-1     store_failed_msgs(q, msg), NORMAL vs raw, NORMAL         parks/s, ratio

Rounds interleaved, best round kept (a noisy shared machine shifts both sides
alike). BENCH_QUICK=1 is a smoke run (fewer parks and rounds).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from _setup import django_on_fresh_sqlite, raw_connection

QUICK = os.environ.get("BENCH_QUICK") == "1"
ONE_OPS = 40 if QUICK else 200
BATCH = 100
BATCHES = 5 if QUICK else 20
ROUNDS = 2 if QUICK else 5
SYNC_OPS = 20 if QUICK else 100


def interleaved(variants: dict[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """Best time of each variant over `rounds` rounds, each round running every
    variant once, the order rotated a step every round."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            times[name].append(variants[name]())
    return {name: min(t) for name, t in times.items()}


def disk_sync_seconds(folder: Path) -> tuple[float, float]:
    """The best and the median of `SYNC_OPS` 4 KB appends each followed by `fdatasync`."""
    path = folder / "sync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    took: list[float] = []
    try:
        for _ in range(SYNC_OPS):
            start = time.perf_counter()
            os.write(fd, b"\0" * 4096)
            os.fdatasync(fd)
            took.append(time.perf_counter() - start)
    finally:
        os.close(fd)
        path.unlink()
    return min(took), statistics.median(took)


def main() -> None:
    if os.environ.get("DATABASE_URL"):
        print("bench_durable measures SQLite's synchronous setting; DATABASE_URL is ignored")
    path = django_on_fresh_sqlite("durable")
    from django.db import connection

    from deadletter import Message, store_failed_msgs
    from deadletter.store import sql
    from deadletter.wire import codec, keys

    def synchronous(level: str) -> None:
        """Django's connection reconnected with `level`, as a site's OPTIONS would set it."""
        options = connection.settings_dict["OPTIONS"]
        options["init_command"] = (
            f"PRAGMA journal_mode=WAL; PRAGMA synchronous={level}; PRAGMA mmap_size=268435456;"
        )
        connection.close()
        connection.ensure_connection()
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA synchronous")
            assert cursor.fetchone()[0] == {"NORMAL": 1, "FULL": 2}[level]

    msg = Message(subject="webhook failed", username="bench", code=502)
    value = codec.encode_one(msg, time.time_ns())
    insert = sql.statement(
        connection, "INSERT INTO {table} ({key}, value, signature) VALUES (?, ?, ?)"
    )
    raw = raw_connection(path)

    def raw_level(level: str) -> None:
        raw.execute(f"PRAGMA synchronous={level}")

    def app_one() -> float:
        start = time.perf_counter()
        for _ in range(ONE_OPS):
            store_failed_msgs("app", msg)
        return time.perf_counter() - start

    def raw_one() -> float:
        start = time.perf_counter()
        for _ in range(ONE_OPS):
            raw.execute(insert, (keys.new_key(b"raw"), value, None))  # autocommit: one commit
        return time.perf_counter() - start

    batch = [msg] * BATCH

    def app_many() -> float:
        start = time.perf_counter()
        for _ in range(BATCHES):
            store_failed_msgs("app", batch)
        return time.perf_counter() - start

    def raw_many() -> float:
        start = time.perf_counter()
        for _ in range(BATCHES):
            raw.execute("BEGIN IMMEDIATE")
            raw.executemany(insert, [(keys.new_key(b"raw"), value, None) for _ in range(BATCH)])
            raw.execute("COMMIT")
        return time.perf_counter() - start

    best_sync, median_sync = disk_sync_seconds(path.parent)
    out = [
        f"SQLite file {path} (WAL); disk sync (4 KB write + fdatasync): "
        f"best {best_sync * 1e3:.2f} ms, median {median_sync * 1e3:.2f} ms"
    ]
    out.append(f"{'row':<10} {'app parks/s':>12} {'raw parks/s':>12} {'ratio':>6}")

    def row(name: str, app_s: float, raw_s: float, count: int) -> str:
        return f"{name:<10} {count / app_s:>12,.0f} {count / raw_s:>12,.0f} {raw_s / app_s:>5.2f}x"

    synchronous("FULL")
    raw_level("FULL")
    best = interleaved({"app": app_one, "raw": raw_one}, ROUNDS)
    out.append(row("full-1", best["app"], best["raw"], ONE_OPS))
    best = interleaved({"app": app_many, "raw": raw_many}, ROUNDS)
    out.append(row("full-100", best["app"], best["raw"], BATCH * BATCHES))
    synchronous("NORMAL")
    raw_level("NORMAL")
    best = interleaved({"app": app_one, "raw": raw_one}, ROUNDS)
    out.append(row("normal-1", best["app"], best["raw"], ONE_OPS))
    raw.close()
    print("\n".join(out))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
