"""The admin's pages at 1,000 rows and at 1,000,000 rows over 20 queues.

Goal (issue 10): the changelist, one queue's changelist, a message page and
the queue overview each answer in under 150 ms of server time at a million
rows, and no query counts the whole table. Prints, per page and size, the
best time of REPEAT requests, the number of queries, and any unbounded
COUNT. One row in ten has a recorded failure (a signature). BENCH_ROWS
overrides the 1,000,000.
"""

from __future__ import annotations

import os
import re
import shutil
import time

from _setup import django_on_fresh_sqlite, raw_connection

ROWS = int(os.environ.get("BENCH_ROWS", "1000000"))
SMALL = 1000
QUEUES = [f"queue-{i:02d}" for i in range(20)]
REPEAT = 7
CAUSES = ["ConnectionError: timeout after # s", "HTTPError: # Service Unavailable for #"]


def fill(raw, total: int, value: bytes, failed_value: bytes) -> None:
    from deadletter.wire import keys

    sql = "INSERT INTO deadletter_queuedmessage (key, value, signature) VALUES (?, ?, ?)"
    batch = []
    for i in range(total):
        failed = i % 10 == 0
        row = (
            keys.new_key(QUEUES[i % len(QUEUES)]),
            failed_value if failed else value,
            CAUSES[i % 20 // 10] if failed else None,
        )
        batch.append(row)
        if len(batch) == 50_000:
            raw.executemany(sql, batch)
            batch.clear()
    if batch:
        raw.executemany(sql, batch)


def main() -> None:
    small_path = django_on_fresh_sqlite("admin-small")
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.db import connection, connections
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from deadletter.wire import codec
    from deadletter.wire.gotime import GoTime
    from deadletter.wire.messages import Message

    settings.ALLOWED_HOSTS = ["*"]
    msg = Message(subject="Ocjena", username="u@skole.hr", queued_at=GoTime.now())
    value = codec.encode_one(msg)
    failed_value = codec.encode_one(
        msg.replace(extra={"Attempts": 2, "LastError": "ConnectionError: timeout after 30 s"})
    )
    User.objects.create_superuser("bench", password="bench")
    connections["default"].close()
    big_path = small_path.with_name("admin-big.sqlite3")
    for suffix in ("", "-wal", "-shm"):
        big_path.with_name(big_path.name + suffix).unlink(missing_ok=True)
    shutil.copy(small_path, big_path)
    for path, total in ((small_path, SMALL), (big_path, ROWS)):
        started = time.perf_counter()
        raw = raw_connection(path)
        raw.execute("BEGIN")
        fill(raw, total, value, failed_value)
        raw.execute("COMMIT")
        raw.execute("ANALYZE")
        raw.close()
        print(f"filled {total:,} rows in {time.perf_counter() - started:.1f} s")

    def first_key(path) -> str:
        raw = raw_connection(path)
        (key,) = raw.execute(
            "SELECT key FROM deadletter_queuedmessage WHERE key > ? ORDER BY key LIMIT 1",
            (b"queue-07",),
        ).fetchone()
        raw.close()
        return key.hex()

    def timed(path, url: str) -> tuple[float, int, list[str]]:
        connections["default"].close()
        connections["default"].settings_dict["NAME"] = str(path)
        client = Client()
        client.login(username="bench", password="bench")
        assert client.get(url).status_code == 200, url
        best = float("inf")
        for _ in range(REPEAT):
            start = time.perf_counter()
            response = client.get(url)
            best = min(best, time.perf_counter() - start)
            assert response.status_code == 200
        with CaptureQueriesContext(connection) as ctx:
            client.get(url)
        counts = [
            q["sql"]
            for q in ctx.captured_queries
            if re.search(r"COUNT\(", q["sql"], re.I)
            and "deadletter_queuedmessage" in q["sql"]
            and not re.search(r"WHERE|LIMIT", q["sql"], re.I)
        ]
        return best, len(ctx.captured_queries), counts

    pages = [
        ("changelist", lambda p: "/admin/deadletter/queuedmessage/"),
        ("one queue", lambda p: "/admin/deadletter/queuedmessage/?queue=queue-07"),
        ("next page", lambda p: f"/admin/deadletter/queuedmessage/?after={first_key(p)}"),
        ("message page", lambda p: f"/admin/deadletter/queuedmessage/{first_key(p)}/change/"),
        ("overview", lambda p: "/admin/deadletter/queuedmessage/overview/"),
    ]
    worst = 0.0
    for label, url_of in pages:
        line = f"{label:13s}"
        for path, total in ((small_path, SMALL), (big_path, ROWS)):
            best, queries, counts = timed(path, url_of(path))
            line += f"  {total:>9,} rows {best * 1e3:6.1f} ms {queries:2d} queries"
            if counts:
                line += f" WHOLE-TABLE COUNT: {counts}"
            if total == ROWS:
                worst = max(worst, best)
        print(line)
    print(f"slowest page at {ROWS:,} rows: {worst * 1e3:.1f} ms (goal < 150 ms)")


if __name__ == "__main__":
    main()
