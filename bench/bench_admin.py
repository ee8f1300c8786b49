"""The admin's queue list at 1,000 rows and at 1,000,000 rows, side by side.

Goal: the first page of the change list (and of one queue, filtered) costs
about the same at a million rows as at a thousand — every read is a range of
the primary-key index. Prints the time per page and the ratio.
BENCH_ROWS overrides the 1,000,000.
"""

from __future__ import annotations

import os
import time

from _setup import django_on_fresh_sqlite, raw_connection

ROWS = int(os.environ.get("BENCH_ROWS", "1000000"))
SMALL = 1000
REPEAT = 10


def fill(raw, queue_names: list[str], total: int, value: bytes) -> None:
    from deadletter import keys

    sql = "INSERT INTO deadletter_queuedmessage (key, value) VALUES (?, ?)"
    batch = []
    for i in range(total):
        batch.append((keys.new_key(queue_names[i % len(queue_names)]), value))
        if len(batch) == 50_000:
            raw.executemany(
                "INSERT INTO deadletter_queuedmessage (key, value) VALUES (?, ?)", batch
            )
            batch.clear()
    if batch:
        raw.executemany(sql, batch)


def main() -> None:
    small_path = django_on_fresh_sqlite("admin-small")
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.db import connections
    from django.test import Client

    from deadletter import codec
    from deadletter.gotime import GoTime
    from deadletter.messages import Message

    settings.ALLOWED_HOSTS = ["*"]
    value = codec.encode_one(
        Message(subject="Ocjena", username="u@skole.hr", queued_at=GoTime.now())
    )
    big_path = small_path.with_name("admin-big.sqlite3")
    for suffix in ("", "-wal", "-shm"):
        big_path.with_name(big_path.name + suffix).unlink(missing_ok=True)
    import shutil

    connections["default"].close()
    shutil.copy(small_path, big_path)
    for path, total in ((small_path, SMALL), (big_path, ROWS)):
        raw = raw_connection(path)
        raw.execute("BEGIN")
        fill(raw, ["webhook-queue", "telegram-queue", "discord-queue"], total, value)
        raw.execute("COMMIT")
        raw.close()

    def timed(path, url: str) -> float:
        connections["default"].close()
        connections["default"].settings_dict["NAME"] = str(path)
        if not User.objects.filter(username="bench").exists():
            User.objects.create_superuser("bench", password="bench")  # noqa: S106
        client = Client()
        client.login(username="bench", password="bench")  # noqa: S106
        assert client.get(url).status_code == 200
        best = float("inf")
        for _ in range(REPEAT):
            start = time.perf_counter()
            response = client.get(url)
            best = min(best, time.perf_counter() - start)
            assert response.status_code == 200
        return best

    for label, url in (
        ("change list", "/admin/deadletter/queuedmessage/"),
        ("one queue", "/admin/deadletter/queuedmessage/?queue=telegram-queue"),
        ("API page", "/deadletter/api/queues/telegram-queue/messages/?limit=50"),
        ("API queues", "/deadletter/api/queues/"),
    ):
        small = timed(small_path, url)
        big = timed(big_path, url)
        print(
            f"{label:12s} {SMALL:,} rows {small * 1e3:7.1f} ms   {ROWS:,} rows {big * 1e3:7.1f} ms"
            f"   ratio {big / small:.2f}x"
        )


if __name__ == "__main__":
    main()
