"""Issue 5: drain workers on PostgreSQL or MySQL/MariaDB with an I/O-bound
handler (waits 5 ms).

Parks BENCH_WORKERS_ROWS messages (default 800) and drains them with 1 and
with 4 worker processes, interleaved BENCH_ROUNDS times (default 2), best
round kept. Goal: 4 workers >= 3x the throughput of 1.

Uses DATABASE_URL when it names PostgreSQL or MySQL/MariaDB, else
postgres://postgres@127.0.0.1:5432/deadletter_bench; on that server a fresh
database `<its database>_workers` (dropped and created), as bench_core does, so
that a run leaves the named database alone. DEBUG is off, as in production.
"""

from __future__ import annotations

import logging
import os
import time

from _setup import django_on_fresh_database, is_mysql_url, is_postgres_url

ROWS = int(os.environ.get("BENCH_WORKERS_ROWS", "800"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "2"))
QUEUE = "bench-workers"
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/deadletter_bench"


def wait_5ms(msg: object) -> None:
    """The handler: an I/O-bound delivery that takes 5 ms."""
    time.sleep(0.005)


def driver_errors() -> tuple[type[Exception], ...]:
    """The drivers' errors for a server that cannot be reached, those installed."""
    errors: list[type[Exception]] = []
    try:
        import psycopg

        errors.append(psycopg.OperationalError)
    except ImportError:
        pass
    try:
        import MySQLdb

        errors.append(MySQLdb.OperationalError)
    except ImportError:
        pass
    return tuple(errors)


def main() -> None:
    url = os.environ.get("DATABASE_URL", "")
    if not (is_postgres_url(url) or is_mysql_url(url)):
        url = DEFAULT_URL
    os.environ["DATABASE_URL"] = url
    try:
        vendor, _target = django_on_fresh_database("workers")
    except driver_errors() as exc:
        print(f"bench_workers needs PostgreSQL or MySQL/MariaDB at {url}: {exc}")
        return
    logging.getLogger("deadletter").setLevel(logging.WARNING)

    from django.conf import settings
    from django.db import connection

    from deadletter.drain import Drainer, DrainOptions
    from deadletter.models import QueuedMessage
    from deadletter.wire import codec, keys
    from deadletter.wire.gotime import GoTime
    from deadletter.wire.messages import Message

    server = connection.display_name
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version" if vendor == "postgresql" else "SELECT VERSION()")
        version = cursor.fetchone()[0]
    settings.DEADLETTER_HANDLERS = {QUEUE: f"{__name__}.wait_5ms"}
    value = codec.encode_one(Message(subject="Ocjena", fields=["5"], queued_at=GoTime.now()))
    low, high = keys.queue_bounds(QUEUE)
    rows = QueuedMessage.objects.filter(key__gte=low, key__lt=high)

    def timed(workers: int) -> float:
        rows.delete()
        QueuedMessage.objects.bulk_create(
            [QueuedMessage(key=keys.new_key(QUEUE), value=value) for _ in range(ROWS)],
            batch_size=1000,
        )
        start = time.perf_counter()
        report = Drainer([QUEUE], DrainOptions(workers=workers)).run()
        elapsed = time.perf_counter() - start
        assert report.delivered == ROWS and not rows.exists(), report
        return elapsed

    one, four = [], []
    for _ in range(ROUNDS):
        one.append(timed(1))
        four.append(timed(4))
    rate1, rate4 = ROWS / min(one), ROWS / min(four)
    print(
        f"drain of {ROWS:,} messages on {server} ({version}), handler waits 5 ms, "
        f"best of {ROUNDS} rounds"
    )
    print(f"  1 worker   {rate1:8.1f} msgs/s")
    print(f"  4 workers  {rate4:8.1f} msgs/s")
    speedup = rate4 / rate1
    print(f"  speed-up   {speedup:8.2f}x  (goal >= 3x) {'OK' if speedup >= 3 else 'MISSED'}")


if __name__ == "__main__":
    main()
