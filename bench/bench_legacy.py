"""Issues 3 and 11: splitting one legacy aggregate row of 200,000 messages; issue 34:
migration 0009 indexing those 200,000 rows for search.

Prints, for the split the data migration and fetch share (`split_legacy_row`,
reached through `legacy.split_legacy_rows` and through the first
`iter_failed_msgs`) and for `kvfile.import_kv` of a Go kv file holding the
same aggregate:
  time       against raw sqlite3 bulk-INSERTing the same rows in one transaction
  peak RSS   growth over the process's resident size before the blob was read
             (goal: < 3x the blob's size)
  lock hold  the longest single write transaction on the app's database (from
             BEGIN IMMEDIATE, or a deferred transaction's first write, to the end
             of its COMMIT), and how many there were (goal: < 250 ms, issue 11:
             a store waits at most that long for SQLite's write lock)
Each measured run is a fresh child process, so one run's peak cannot hide in
another's. BENCH_MESSAGES overrides the 200,000.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _setup import REPO, django_on_fresh_sqlite, raw_connection

MESSAGES = int(os.environ.get("BENCH_MESSAGES", "200000"))
QUEUE = "bench-legacy"
TABLE = "deadletter_queuedmessage"
KV_SCHEMA = (
    "CREATE TABLE kv (key BLOB PRIMARY KEY, value BLOB, expires_at INTEGER);"
    "CREATE INDEX idx_expires_at ON kv(expires_at);"
)


def peak_rss_reset() -> None:
    """Start the kernel's high-water mark (VmHWM) over from the current RSS."""
    Path("/proc/self/clear_refs").write_text("5")


def status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


class LockHolds:
    """The write transactions on one Django SQLite connection, timed from the driver's trace.

    The hold starts at `BEGIN IMMEDIATE` (the settings' transaction mode) or at
    a deferred transaction's first write, and ends once Django's commit or
    rollback has returned: the time another writer would wait.
    """

    WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "DROP", "ALTER")

    def __init__(self, connection: Any) -> None:
        self.longest = 0.0
        self.count = 0
        self.started: float | None = None
        self.in_transaction = False
        self.statements: list[str] = []
        self.longest_statements: list[str] = []
        connection.connection.set_trace_callback(self.statement)
        for name in ("_commit", "_rollback"):
            original = getattr(connection, name)
            setattr(connection, name, self.ending(original))

    def statement(self, text: str) -> None:
        head = text.lstrip().upper()
        if self.in_transaction and len(self.statements) < 4:
            self.statements.append(" ".join(text.split())[:60])
        if head.startswith("BEGIN"):
            self.in_transaction = True
            if "IMMEDIATE" in head or "EXCLUSIVE" in head:
                self.started = time.perf_counter()
        elif self.in_transaction and self.started is None and head.startswith(self.WRITES):
            self.started = time.perf_counter()

    def ending(self, original: Any) -> Any:
        def end() -> None:
            original()
            if self.started is not None:
                held = time.perf_counter() - self.started
                if held > self.longest:
                    self.longest, self.longest_statements = held, self.statements
                self.count += 1
            self.started = None
            self.statements = []
            self.in_transaction = False

        return end


def child(mode: str, path: Path, kv_path: Path) -> None:
    os.environ["DEADLETTER_SQLITE_PATH"] = str(path)
    os.environ.pop("DATABASE_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    os.environ.setdefault("DJANGO_DEBUG", "0")  # as in production: no query log
    sys.path.insert(0, str(REPO))
    import django

    django.setup()
    from django.db import connection

    from deadletter import queue
    from deadletter.queue import legacy
    from deadletter.transfer import kvfile

    connection.ensure_connection()
    with connection.cursor() as cursor:  # warm the connection and the SQL paths
        cursor.execute(f"SELECT COUNT(*) FROM {TABLE}")
    holds = LockHolds(connection)
    peak_rss_reset()
    base_kb = status_kb("VmRSS")
    start = time.perf_counter()
    if mode == "migration":
        split, stored = legacy.split_legacy_rows(connection, TABLE)
        assert (split, stored) == (1, MESSAGES), (split, stored)
    elif mode == "index":
        from deadletter.migrations._0009_frozen import index_pending_rows

        indexed = index_pending_rows(connection, TABLE, "deadletter_searchterm")
        assert indexed == MESSAGES, indexed
    elif mode == "fetch":
        first = next(queue.iter_failed_msgs(QUEUE))  # splits the aggregate, then reads
        assert first.msg.subject == "Ocjena 0: Matematika", first
    else:
        report = kvfile.import_kv(kv_path)
        assert report.total.written == MESSAGES, report.total
    elapsed = time.perf_counter() - start
    peak_kb = status_kb("VmHWM")
    result = {"seconds": elapsed, "growth": (peak_kb - base_kb) * 1024}
    result |= {"lock": holds.longest, "transactions": holds.count}
    if os.environ.get("BENCH_VERBOSE"):
        print("longest write transaction:", holds.longest_statements, file=sys.stderr)
    print(json.dumps(result))


def measure(mode: str, path: Path, kv_path: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, str(path), str(kv_path)],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]))
        return
    path = django_on_fresh_sqlite("legacy")
    kv_path = path.with_name("legacy-kv.sqlite")
    kv_path.unlink(missing_ok=True)

    from deadletter.wire import codec
    from deadletter.wire.gotime import GoTime
    from deadletter.wire.messages import Message

    queued = GoTime.now()
    blob = codec.encode(
        [
            Message(
                timestamp=queued,
                queued_at=queued,
                username=f"ucenik{i % 500}@skole.hr",
                subject=f"Ocjena {i}: Matematika",
                descriptions=["Datum", "Ocjena", "Napomena"],
                fields=["27.11.2026.", str(i % 5 + 1), "Usmeno odgovaranje"],
                code=i % 5,
            )
            for i in range(MESSAGES)
        ]
    )
    raw = raw_connection(path)
    raw.execute(f"INSERT INTO {TABLE} (key, value) VALUES (?, ?)", (QUEUE.encode(), blob))
    kv = sqlite3.connect(kv_path)
    kv.executescript(KV_SCHEMA)
    kv.execute("INSERT INTO kv (key, value) VALUES (?, ?)", (QUEUE.encode(), blob))
    kv.commit()
    kv.close()

    migration = measure("migration", path, kv_path)
    indexing = measure("index", path, kv_path)
    raw.execute("DELETE FROM deadletter_searchterm")
    rows = raw.execute(f"SELECT key, value FROM {TABLE} ORDER BY key").fetchall()
    assert len(rows) == MESSAGES
    raw.execute(f"DELETE FROM {TABLE}")
    raw.execute(f"INSERT INTO {TABLE} (key, value) VALUES (?, ?)", (QUEUE.encode(), blob))
    fetch = measure("fetch", path, kv_path)
    raw.execute(f"DELETE FROM {TABLE}")
    imported = measure("import", path, kv_path)
    raw.execute(f"DELETE FROM {TABLE}")

    start = time.perf_counter()
    raw.execute("BEGIN")
    raw.executemany(f"INSERT INTO {TABLE} (key, value) VALUES (?, ?)", rows)
    raw.execute("COMMIT")
    raw_seconds = time.perf_counter() - start

    mb = 1024 * 1024
    print(f"legacy aggregate: {MESSAGES} messages, blob {len(blob) / mb:.1f} MB")
    print(f"raw sqlite3 bulk INSERT of the same rows: {raw_seconds:.2f} s")
    results = (
        ("migration (split_legacy_rows)", migration),
        ("migration 0009 (search index of the split rows)", indexing),
        ("first fetch (iter_failed_msgs)", fetch),
        ("import_kv", imported),
    )
    for name, result in results:
        print(
            f"{name}: {result['seconds']:.2f} s ({result['seconds'] / raw_seconds:.1f}x raw), "
            f"peak RSS growth {result['growth'] / mb:.1f} MB "
            f"({result['growth'] / len(blob):.2f}x the blob; goal < 3x); "
            f"longest write lock hold {result['lock'] * 1000:.0f} ms "
            f"over {result['transactions']:.0f} transactions (goal < 250 ms)"
        )


if __name__ == "__main__":
    main()
