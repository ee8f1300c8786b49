"""One evaluation of the alert rules at 1,000,000 rows in 20 queues.

Goal (issue 36): one evaluation costs < 100 ms, and reads no whole count. Every
queue has every rule on (new_cause, reopened_cause, depth 1,000, oldest_age 6 h,
expiring within a day, breaker, stalled 15 min; the signal as its only channel),
each queue holds 50,000 rows going back about 7 hours (so depth and oldest_age
hold), 40 causes (two a queue, some resolved and reopened, one muted), and a
drain pass recorded for each (two paused by their breaker).

Prints the first evaluation (everything fires: one digest), then the median and
best of REPEAT evaluations in the steady state (all sent: nothing to send, what
every drain pass costs), with their statement counts and any COUNT without a
bound, beside the admin's queue overview at the same size in the same run (its
first page, median of REPEAT) as a ratio. SQLite by default; `DATABASE_URL`
names PostgreSQL or MariaDB. BENCH_ROWS overrides the 1,000,000.
"""

from __future__ import annotations

import os
import re
import statistics
import time
from datetime import UTC, datetime, timedelta

from _setup import django_on_fresh_database

ROWS = int(os.environ.get("BENCH_ROWS", "1000000"))
QUEUES = [f"queue-{i:02d}" for i in range(20)]
REPEAT = 9
BATCH = 50_000
SPACING_NS = 500_000_000  # half a second between two rows of a queue
CAUSES = ["ConnectionError: timeout after # s", "HTTPError: # Service Unavailable for #"]


def fill(total: int) -> None:
    """`total` rows over the queues, one in ten with a recorded failure, written by
    executemany in transactions of BATCH rows."""
    from django.db import connection, transaction

    from deadletter.wire import codec, keys
    from deadletter.wire.gotime import GoTime
    from deadletter.wire.messages import Message

    per_queue = total // len(QUEUES)
    now_ns = time.time_ns()
    values = [
        codec.encode_one(
            Message(subject=f"order {i}", username="u@example.com", queued_at=GoTime.now())
        )
        for i in range(20)
    ]
    sql = (
        f"INSERT INTO deadletter_queuedmessage ({connection.ops.quote_name('key')}, value, "
        "signature) VALUES (%s, %s, %s)"
    )
    rows = []
    for q, name in enumerate(QUEUES):
        for j in range(per_queue):
            at = now_ns - (per_queue - j) * SPACING_NS
            signature = CAUSES[j % 2] if j % 10 == 0 else None
            rows.append((keys.make_key(name, at, j), values[(q + j) % 20], signature))
            if len(rows) == BATCH:
                with transaction.atomic(), connection.cursor() as cursor:
                    cursor.executemany(sql, rows)
                rows.clear()
    if rows:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.executemany(sql, rows)
    with connection.cursor() as cursor:
        cursor.execute(
            "ANALYZE" if connection.vendor != "mysql" else "ANALYZE TABLE deadletter_queuedmessage"
        )


def causes_and_passes() -> None:
    """Two causes a queue (every fourth resolved, every fifth reopened, one muted) and
    a drain pass for each queue (two paused)."""
    from deadletter.models import Cause, QueuePass

    now = datetime.now(UTC)
    made = []
    for q, name in enumerate(QUEUES):
        for s, signature in enumerate(CAUSES):
            n = 2 * q + s
            status = "resolved" if n % 4 == 3 else "open"
            made.append(
                Cause(
                    queue=name,
                    signature=signature,
                    first_seen=now - timedelta(hours=7),
                    last_seen=now,
                    count=5000,
                    status="muted" if n == 5 else status,
                    muted_until=now + timedelta(hours=1) if n == 5 else None,
                    opened_at=now - timedelta(minutes=n),
                    reopened=n % 5 == 4,
                )
            )
    Cause.objects.bulk_create(made)
    QueuePass.objects.bulk_create(
        [
            QueuePass(queue=name, finished_at=now, paused=q in (3, 11))
            for q, name in enumerate(QUEUES)
        ]
    )


def main() -> None:
    vendor, _ = django_on_fresh_database("alerts")
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from deadletter.reports.alerts.evaluate import evaluate

    settings.ALLOWED_HOSTS = ["*"]
    settings.DEADLETTER_SITE_URL = "https://ops.example.com"
    settings.DEADLETTER_ALERTS = {
        "new_cause": True,
        "reopened_cause": True,
        "depth": 1000,
        "oldest_age": timedelta(hours=6),
        "expiring": timedelta(days=1),
        "breaker": True,
        "stalled": timedelta(minutes=15),
        "channels": [],
    }
    settings.DEADLETTER_HANDLERS = dict.fromkeys(QUEUES, "tests.factories.ok_handler")
    started = time.perf_counter()
    fill(ROWS)
    causes_and_passes()
    took = time.perf_counter() - started
    print(f"{vendor}: filled {ROWS:,} rows in {len(QUEUES)} queues in {took:.1f} s")

    started = time.perf_counter()
    first = evaluate()
    took = time.perf_counter() - started
    print(
        f"first evaluation: {took * 1e3:.1f} ms, fired {first.fired}, sent {first.sent} "
        f"(digest of {first.digested})"
    )

    def timed_evaluation() -> tuple[float, float]:
        start, start_cpu = time.perf_counter(), time.process_time()
        done = evaluate()
        assert done.sent == 0 and done.fired == 0, done
        return time.perf_counter() - start, time.process_time() - start_cpu

    runs = [timed_evaluation() for _ in range(REPEAT)]
    with CaptureQueriesContext(connection) as ctx:
        evaluate()
    statements = len(ctx.captured_queries)  # read now: a request resets the log
    unbounded = [
        q["sql"]
        for q in ctx.captured_queries
        if re.search(r"COUNT\(", q["sql"], re.I) and not re.search(r"LIMIT", q["sql"], re.I)
    ]
    median = statistics.median(r[0] for r in runs)
    cpu = statistics.median(r[1] for r in runs)

    User.objects.create_superuser("bench", password="bench")
    client = Client()
    client.login(username="bench", password="bench")
    overview = "/admin/deadletter/queuedmessage/overview/"
    assert client.get(overview).status_code == 200
    pages = []
    for _ in range(REPEAT):
        start = time.perf_counter()
        assert client.get(overview).status_code == 200
        pages.append(time.perf_counter() - start)
    page = statistics.median(pages)
    print(
        f"steady evaluation at {ROWS:,} rows: median {median * 1e3:.1f} ms ({cpu * 1e3:.1f} ms "
        f"CPU), best {min(r[0] for r in runs) * 1e3:.1f} ms, {statements} "
        f"statements, unbounded COUNT: {unbounded or 'none'} (goal < 100 ms)"
    )
    print(
        f"overview page at {ROWS:,} rows: median {page * 1e3:.1f} ms; "
        f"evaluation / overview = {median / page:.2f}"
    )


if __name__ == "__main__":
    main()
