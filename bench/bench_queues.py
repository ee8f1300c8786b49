"""The reports at 100, 10,000 and 100,000 one-row queues, side by side in one run.

Goal (issue 32, point 5): the admin overview, a Prometheus scrape,
`deadletter_stats` and the API's `GET queues/` stay bounded however many queue
names clients make (the overview under 1 s, a scrape under 2 s). For each
surface and size it prints the best time of REPEAT requests, the peak of
Python's allocations during one more (tracemalloc, measured apart from the
timed runs) and the number of statements; then the ratios of the biggest to
the middle and to the smallest size. SQLite files; BENCH_QUEUES overrides
the 100,000.
"""

from __future__ import annotations

import os
import shutil
import time
import tracemalloc
from collections.abc import Callable
from io import StringIO

from _setup import django_on_fresh_sqlite, raw_connection

QUEUES = int(os.environ.get("BENCH_QUEUES", "100000"))
SIZES = (100, QUEUES // 10, QUEUES)
REPEAT = 3
TOKEN = "bench-token"  # noqa: S105


def fill(path: object, count: int) -> None:
    """`count` one-row queues, as API clients would make them, by raw SQLite."""
    from deadletter.wire import codec, keys
    from deadletter.wire.gotime import GoTime
    from deadletter.wire.messages import Message

    value = codec.encode_one(Message(subject="spam", queued_at=GoTime.now()))
    raw = raw_connection(path)  # type: ignore[arg-type]
    raw.execute("BEGIN")
    raw.executemany(
        "INSERT INTO deadletter_queuedmessage (key, value) VALUES (?, ?)",
        ((keys.new_key(f"client-{i:06d}"), value) for i in range(count)),
    )
    raw.execute("COMMIT")
    raw.execute("ANALYZE")
    raw.close()


def main() -> None:
    small_path = django_on_fresh_sqlite("queues-small")
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.db import connection, connections, reset_queries
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    settings.ALLOWED_HOSTS = ["*"]
    settings.DEADLETTER_METRICS_TOKEN = TOKEN
    settings.DEADLETTER_EXPIRY_WARNING = None
    User.objects.create_superuser("bench", password="bench")  # noqa: S106
    connections["default"].close()
    paths = [small_path.with_name(f"queues-{n}.sqlite3") for n in SIZES]
    for path, count in zip(paths, SIZES, strict=True):
        for suffix in ("", "-wal", "-shm"):
            path.with_name(path.name + suffix).unlink(missing_ok=True)
        shutil.copy(small_path, path)
        started = time.perf_counter()
        fill(path, count)
        print(f"filled {count:,} one-row queues in {time.perf_counter() - started:.1f} s")

    def client() -> Client:
        c = Client()
        c.login(username="bench", password="bench")  # noqa: S106
        return c

    def get(url: str, **headers: str) -> Callable[[Client], None]:
        def run(c: Client) -> None:
            response = c.get(url, headers=headers)
            assert response.status_code == 200, (url, response.status_code)

        return run

    def stats(c: Client) -> None:
        call_command("deadletter_stats", stdout=StringIO())

    surfaces = [
        ("admin overview", get("/admin/deadletter/queuedmessage/overview/")),
        ("metrics scrape", get("/deadletter/metrics", Authorization=f"Bearer {TOKEN}")),
        ("deadletter_stats", stats),
        ("GET queues/", get("/api/deadletter/queues/")),
    ]

    def measure(path: object, run: Callable[[Client], None]) -> tuple[float, int, int]:
        connections["default"].close()
        connections["default"].settings_dict["NAME"] = str(path)
        c = client()
        run(c)
        best = float("inf")
        for _ in range(REPEAT):
            start = time.perf_counter()
            run(c)
            best = min(best, time.perf_counter() - start)
        tracemalloc.start()
        run(c)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        reset_queries()
        with CaptureQueriesContext(connection) as ctx:
            run(c)
        return best, peak, len(ctx.captured_queries)

    print(f"{'surface':17s}" + "".join(f" | {n:>7,} queues: time, peak mem, stmts" for n in SIZES))
    for label, run in surfaces:
        found = [measure(path, run) for path in paths]
        cells = [f"{t * 1e3:8.1f} ms {m / 2**20:6.1f} MiB {q:5d}" for t, m, q in found]
        (t0, m0, _), (t1, m1, _), (t2, m2, _) = found
        print(
            f"{label:17s} | "
            + " | ".join(f"{c:>33s}" for c in cells)
            + f" | {SIZES[2]:,} vs {SIZES[1]:,}: time {t2 / t1:.2f}x mem {m2 / m1:.2f}x"
            + f"; vs {SIZES[0]:,}: time {t2 / t0:.2f}x mem {m2 / m0:.2f}x"
        )


if __name__ == "__main__":
    main()
