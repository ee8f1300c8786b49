"""The REST API at 1,000 rows and at 1,000,000 rows, side by side (SQLite).

Goals (issue 13): with 1,000,000 rows a page of 100 messages answers in under
50 ms of server time and the queue list in under 100 ms. Prints the best of
REPEAT requests through Django's test client (the server's whole time: routing,
authentication, the reads, serializers, JSON) and the ratio.
BENCH_ROWS overrides the 1,000,000.
"""

from __future__ import annotations

import os
import shutil
import time

from _setup import django_on_fresh_sqlite, raw_connection

ROWS = int(os.environ.get("BENCH_ROWS", "1000000"))
SMALL = 1000
REPEAT = 10
QUEUES = ["webhook-queue", "telegram-queue", "discord-queue"]
API = "/api/deadletter"


def fill(path, total: int, value: bytes) -> None:
    from deadletter.wire import keys

    raw = raw_connection(path)
    raw.execute("BEGIN")
    sql = "INSERT INTO deadletter_queuedmessage (key, value) VALUES (?, ?)"
    batch = []
    for i in range(total):
        batch.append((keys.new_key(QUEUES[i % len(QUEUES)]), value))
        if len(batch) == 50_000:
            raw.executemany(sql, batch)
            batch.clear()
    raw.executemany(sql, batch)
    raw.execute("COMMIT")
    raw.close()


def main() -> None:
    small_path = django_on_fresh_sqlite("api-small")
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.db import connections
    from rest_framework.test import APIClient

    from deadletter.wire import codec
    from deadletter.wire.gotime import GoTime
    from deadletter.wire.messages import Message

    settings.ALLOWED_HOSTS = ["*"]
    User.objects.create_superuser("bench")
    value = codec.encode_one(
        Message(
            subject="Ocjena",
            username="u@skole.hr",
            descriptions=["Matematika", "5"],
            fields=["grade"],
            queued_at=GoTime.now(),
            timestamp=GoTime.now(),
        )
    )
    connections["default"].close()
    big_path = small_path.with_name("api-big.sqlite3")
    for suffix in ("", "-wal", "-shm"):
        big_path.with_name(big_path.name + suffix).unlink(missing_ok=True)
    shutil.copy(small_path, big_path)
    fill(small_path, SMALL, value)
    fill(big_path, ROWS, value)

    def timed(path, url: str) -> float:
        connections["default"].close()
        connections["default"].settings_dict["NAME"] = str(path)
        client = APIClient()
        client.force_login(User.objects.get(username="bench"))
        response = client.get(url)
        assert response.status_code == 200, response.content[:300]
        best = float("inf")
        for _ in range(REPEAT):
            start = time.perf_counter()
            response = client.get(url)
            best = min(best, time.perf_counter() - start)
            assert response.status_code == 200
        return best

    def middle_key(path) -> str:
        raw = raw_connection(path)
        (count,) = raw.execute(
            "SELECT COUNT(*) FROM deadletter_queuedmessage WHERE key >= ? AND key < ?",
            (b"telegram-queue", b"telegram-queue\x01"),
        ).fetchone()
        (key,) = raw.execute(
            "SELECT key FROM deadletter_queuedmessage WHERE key >= ? AND key < ? "
            "ORDER BY key LIMIT 1 OFFSET ?",
            (b"telegram-queue", b"telegram-queue\x01", max(0, count // 2 - 100)),
        ).fetchone()
        raw.close()
        return bytes(key).hex()

    page = f"{API}/queues/telegram-queue/messages/?limit=100"
    goals = {"page of 100, first": 50, "page of 100, middle": 50, "queue list": 100}
    for label, small_url, big_url in (
        ("page of 100, first", page, page),
        (
            "page of 100, middle",
            f"{page}&after={middle_key(small_path)}",
            f"{page}&after={middle_key(big_path)}",
        ),
        ("queue list", f"{API}/queues/", f"{API}/queues/"),
    ):
        small = timed(small_path, small_url)
        big = timed(big_path, big_url)
        print(
            f"{label:20s} {SMALL:,} rows {small * 1e3:6.1f} ms   {ROWS:,} rows {big * 1e3:6.1f} ms"
            f"   ratio {big / small:.2f}x   goal < {goals[label]} ms at 1,000,000"
        )


if __name__ == "__main__":
    main()
