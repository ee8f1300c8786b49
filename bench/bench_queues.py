"""The reports at 100, 10,000 and 100,000 one-row queues, side by side in one run.

Goal (issue 32, point 5): the admin overview and change list, a Prometheus
scrape, `deadletter_stats` and the API's `GET queues/` stay bounded however
many queue names clients make (the overview under 1 s, a scrape under 2 s). For each
surface and size it prints the best time of REPEAT requests, the peak of
Python's allocations during one more (tracemalloc, measured apart from the
timed runs) and the number of statements; then the ratios of the biggest to
the middle and to the smallest size. One database grown from one size to
the next: a SQLite file, or a fresh PostgreSQL database when `DATABASE_URL`
names a server. BENCH_QUEUES overrides the 100,000.
"""

from __future__ import annotations

import os
import time
import tracemalloc
from collections.abc import Callable
from io import StringIO

from _setup import django_on_fresh_database

QUEUES = int(os.environ.get("BENCH_QUEUES", "100000"))
SIZES = (100, QUEUES // 10, QUEUES)
REPEAT = 5
TOKEN = "bench-token"


def grow(start: int, stop: int) -> None:
    """One-row queues `client-<start>` .. `client-<stop - 1>`, as API clients would
    make them."""
    from deadletter.models import QueuedMessage
    from deadletter.wire import codec, keys
    from deadletter.wire.gotime import GoTime
    from deadletter.wire.messages import Message

    value = codec.encode_one(Message(subject="spam", queued_at=GoTime.now()))
    for low in range(start, stop, 10_000):
        QueuedMessage.objects.bulk_create(
            QueuedMessage(key=keys.new_key(f"client-{i:06d}"), value=value)
            for i in range(low, min(stop, low + 10_000))
        )


def main() -> None:
    vendor, target = django_on_fresh_database("queues")
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.db import connection, reset_queries
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    settings.ALLOWED_HOSTS = ["*"]
    settings.DEADLETTER_METRICS_TOKEN = TOKEN
    settings.DEADLETTER_EXPIRY_WARNING = None
    User.objects.create_superuser("bench", password="bench")
    print(f"{vendor}: {target}")

    def client() -> Client:
        c = Client()
        c.login(username="bench", password="bench")
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
        ("admin change list", get("/admin/deadletter/queuedmessage/")),
        ("metrics scrape", get("/deadletter/metrics", Authorization=f"Bearer {TOKEN}")),
        ("deadletter_stats", stats),
        ("GET queues/", get("/api/deadletter/queues/")),
    ]

    def measure(run: Callable[[Client], None]) -> tuple[float, int, int]:
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

    found: dict[str, list[tuple[float, int, int]]] = {label: [] for label, _ in surfaces}
    made = 0
    for size in SIZES:
        started = time.perf_counter()
        grow(made, size)
        made = size
        with connection.cursor() as cursor:  # as autovacuum would after such an insert
            cursor.execute(
                {"sqlite": "ANALYZE", "postgresql": "ANALYZE deadletter_queuedmessage"}.get(
                    vendor, "ANALYZE TABLE deadletter_queuedmessage"
                )
            )
        print(f"{size:,} one-row queues ({time.perf_counter() - started:.1f} s to add)")
        for label, run in surfaces:
            found[label].append(measure(run))

    print(f"{'surface':17s}" + "".join(f" | {n:>7,} queues: time, peak mem, stmts" for n in SIZES))
    for label, _ in surfaces:
        cells = [f"{t * 1e3:8.1f} ms {m / 2**20:6.1f} MiB {q:5d}" for t, m, q in found[label]]
        (t0, m0, _), (t1, m1, _), (t2, m2, _) = found[label]
        print(
            f"{label:17s} | "
            + " | ".join(f"{c:>33s}" for c in cells)
            + f" | {SIZES[2]:,} vs {SIZES[1]:,}: time {t2 / t1:.2f}x mem {m2 / m1:.2f}x"
            + f"; vs {SIZES[0]:,}: time {t2 / t0:.2f}x mem {m2 / m0:.2f}x"
        )


if __name__ == "__main__":
    main()
