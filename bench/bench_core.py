"""Issue 2: the queue's hot paths against raw sqlite3 doing the same SQL on the same file.

Prints ratios measured side by side in one run (rounds interleaved, best
round kept), so a noisy shared machine shifts both sides alike:
  store    one store_failed_msgs vs a raw INSERT + commit   (goal: <= 2x the time)
  dequeue  one dequeue vs a raw DELETE + commit             (goal: <= 2x the time)
  depth    store into a 1,000,000-row queue vs into an empty one (goal: <= 1.2x)
  scan     iter_failed_msgs over 1,000,000 rows vs raw scan + cbor2 decode
           (goal: >= 0.5x the throughput, peak RSS growth < 100 MB), and the
           same without the C speed-up (deadletter/_speedups.c)
BENCH_ROWS overrides the 1,000,000.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from _setup import REPO, django_on_fresh_sqlite, raw_connection, rss_bytes

ROWS = int(os.environ.get("BENCH_ROWS", "1000000"))
OPS = 3000
ROUNDS = 9
SCAN_ROUNDS = 6


def best(fn, rounds: int = ROUNDS) -> float:
    return min(fn() for _ in range(rounds))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--scan-child":
        scan_child(Path(sys.argv[2]), sys.argv[3])
        return
    path = django_on_fresh_sqlite("core")

    import cbor2

    from deadletter import codec, keys
    from deadletter.messages import Message
    from deadletter.queue import dequeue, store_failed_msgs

    sample = Message(
        subject="Ocjena: Matematika",
        username="ucenik1@skole.hr",
        descriptions=["Datum", "Ocjena"],
        fields=["27.11.2026.", "5"],
    )
    stamped = sample.replace(queued_at=__import__("deadletter.gotime").gotime.GoTime.now())
    value = codec.encode_one(stamped)
    raw = raw_connection(path)
    table = "deadletter_queuedmessage"

    def app_store() -> float:
        start = time.perf_counter()
        for _ in range(OPS):
            store_failed_msgs("bench", stamped)
        return time.perf_counter() - start

    def raw_store() -> float:
        rows = [keys.new_key("raw") for _ in range(OPS)]
        start = time.perf_counter()
        for key in rows:
            raw.execute(f"INSERT INTO {table} (key, value) VALUES (?, ?)", (key, value))
        return time.perf_counter() - start

    app_s, raw_s = [], []
    for _ in range(ROUNDS):
        app_s.append(app_store())
        raw_s.append(raw_store())
    store_ratio = min(app_s) / min(raw_s)

    def app_dequeue(batch: list[bytes]) -> float:
        start = time.perf_counter()
        for key in batch:
            dequeue(key)
        return time.perf_counter() - start

    def raw_dequeue(batch: list[bytes]) -> float:
        start = time.perf_counter()
        for key in batch:
            raw.execute(f"DELETE FROM {table} WHERE key = ?", (key,))
        return time.perf_counter() - start

    def keys_of(queue: str) -> list[bytes]:
        low, high = keys.queue_bounds(queue)
        return [
            r[0]
            for r in raw.execute(
                f"SELECT key FROM {table} WHERE key >= ? AND key < ? ORDER BY key", (low, high)
            )
        ]

    app_keys, raw_keys = keys_of("bench"), keys_of("raw")
    app_d, raw_d = [], []
    for r in range(ROUNDS):
        app_d.append(app_dequeue(app_keys[r * OPS : (r + 1) * OPS]))
        raw_d.append(raw_dequeue(raw_keys[r * OPS : (r + 1) * OPS]))
    dequeue_ratio = min(app_d) / min(raw_d)

    # Depth: fill one queue to ROWS rows with raw SQL, then time stores into it
    # against stores into an empty queue, interleaved.
    batch: list[tuple[bytes, bytes]] = []
    for _ in range(ROWS):
        batch.append((keys.new_key("deep"), value))
        if len(batch) == 50_000:
            raw.execute("BEGIN")
            raw.executemany(f"INSERT INTO {table} (key, value) VALUES (?, ?)", batch)
            raw.execute("COMMIT")
            batch.clear()
    if batch:
        raw.execute("BEGIN")
        raw.executemany(f"INSERT INTO {table} (key, value) VALUES (?, ?)", batch)
        raw.execute("COMMIT")
    # One row in a queue sorting after all of these, so that neither side gets
    # SQLite's append-at-the-end-of-the-table shortcut: with several queues a
    # store lands inside the key order, whatever the depth of its queue.
    raw.execute(
        f"INSERT INTO {table} (key, value) VALUES (?, ?)", (keys.new_key("~after-all"), value)
    )
    raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def timed_store(queue: str) -> float:
        start = time.perf_counter()
        for _ in range(OPS):
            store_failed_msgs(queue, stamped)
        return time.perf_counter() - start

    deep_t, empty_t = [], []
    for r in range(ROUNDS):
        deep_t.append(timed_store("deep"))
        empty_t.append(timed_store(f"empty-{r}"))
    depth_ratio = min(deep_t) / min(empty_t)

    # Scan: each side in its own fresh process so peak RSS is its own.
    def child(mode: str) -> dict:
        out = subprocess.run(
            [sys.executable, __file__, "--scan-child", str(path), mode],
            check=True,
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ, "DEADLETTER_SQLITE_PATH": str(path)},
        )
        return json.loads(out.stdout.strip().splitlines()[-1])

    app_runs = []
    python_runs = []
    raw_runs = []
    for _ in range(SCAN_ROUNDS):
        app_runs.append(child("app"))
        python_runs.append(child("app-python"))
        raw_runs.append(child("raw"))
    app_scan = max(app_runs, key=lambda r: r["rate"])
    python_scan = max(python_runs, key=lambda r: r["rate"])
    raw_scan = max(raw_runs, key=lambda r: r["rate"])
    scan_ratio = app_scan["rate"] / raw_scan["rate"]
    _ = cbor2

    print(f"rows in the deep queue: {ROWS:,}; {OPS:,} ops per round, best of {ROUNDS} rounds")
    print(
        f"store:   app {min(app_s) / OPS * 1e6:7.1f} us/op  raw INSERT+commit "
        f"{min(raw_s) / OPS * 1e6:7.1f} us/op  time ratio {store_ratio:.2f}x  (goal <= 2x)"
    )
    print(
        f"dequeue: app {min(app_d) / OPS * 1e6:7.1f} us/op  raw DELETE+commit "
        f"{min(raw_d) / OPS * 1e6:7.1f} us/op  time ratio {dequeue_ratio:.2f}x  (goal <= 2x)"
    )
    print(
        f"depth:   store into {ROWS:,}-row queue {min(deep_t) / OPS * 1e6:.1f} us/op, "
        f"into empty {min(empty_t) / OPS * 1e6:.1f} us/op  ratio {depth_ratio:.2f}x  (goal <= 1.2x)"
    )
    print(
        f"scan:    iter_failed_msgs {app_scan['rate']:,.0f} msg/s, raw scan+decode "
        f"{raw_scan['rate']:,.0f} msg/s  throughput ratio {scan_ratio:.2f}x  (goal >= 0.5x); "
        f"peak RSS growth {app_scan['rss_growth'] / 2**20:.1f} MB (goal < 100 MB), "
        f"raw {raw_scan['rss_growth'] / 2**20:.1f} MB"
    )
    print(
        f"         without the C speed-up: iter_failed_msgs {python_scan['rate']:,.0f} msg/s, "
        f"throughput ratio {python_scan['rate'] / raw_scan['rate']:.2f}x"
    )


def scan_child(path: Path, mode: str) -> None:
    """Scan the deep queue once; print JSON with the rate and the peak RSS growth."""
    import threading

    sys.path.insert(0, str(REPO))
    if mode.startswith("app"):
        os.environ["DEADLETTER_SQLITE_PATH"] = str(path)
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
        import django

        django.setup()
        from django.db import connection

        connection.ensure_connection()
        from deadletter import codec
        from deadletter.queue import iter_failed_msgs

        if mode == "app-python":
            codec._go_message = None
        elif codec._go_message is None:
            sys.exit("the C speed-up is not built: run ./dev (or pip install -e .) first")
    else:
        import cbor2

        from deadletter import keys
    base = rss_bytes()
    peak = [base]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], rss_bytes())
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    count = 0
    if mode.startswith("app"):
        for _ in iter_failed_msgs("deep"):
            count += 1
    else:
        low, high = keys.queue_bounds("deep")
        conn = raw_connection(path)
        after, op = low, ">="
        while True:
            rows = conn.execute(
                f"SELECT key, value FROM deadletter_queuedmessage WHERE key {op} ? AND key < ? "
                "ORDER BY key LIMIT 1000",
                (after, high),
            ).fetchall()
            for _key, value in rows:
                for _msg in cbor2.loads(value):
                    count += 1
            if len(rows) < 1000:
                break
            after, op = rows[-1][0], ">"
    elapsed = time.perf_counter() - start
    stop.set()
    sampler.join()
    peak[0] = max(peak[0], rss_bytes())
    print(json.dumps({"count": count, "rate": count / elapsed, "rss_growth": peak[0] - base}))


if __name__ == "__main__":
    main()
