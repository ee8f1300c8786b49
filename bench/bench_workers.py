"""Issue 5: drain workers on PostgreSQL with an I/O-bound handler (waits 5 ms).

Parks BENCH_WORKERS_ROWS messages (default 800) and drains them with 1 and
with 4 worker processes, interleaved BENCH_ROUNDS times (default 2), best
round kept. Goal: 4 workers >= 2.5x the throughput of 1.

Uses DATABASE_URL when it names PostgreSQL, else
postgres://postgres@127.0.0.1:5432/deadletter_bench (created if missing).
DEBUG is off, as in production.
"""

from __future__ import annotations

import logging
import os
import sys
import time

from _setup import REPO

ROWS = int(os.environ.get("BENCH_WORKERS_ROWS", "800"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "2"))
QUEUE = "bench-workers"
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/deadletter_bench"


def wait_5ms(msg: object) -> None:
    """The handler: an I/O-bound delivery that takes 5 ms."""
    time.sleep(0.005)


def ensure_database(url: str) -> bool:
    import psycopg
    from dj_database_url import parse

    cfg = parse(url)
    conninfo = {
        "host": cfg["HOST"] or "127.0.0.1",
        "port": cfg["PORT"] or 5432,
        "user": cfg["USER"] or "postgres",
        "password": cfg["PASSWORD"] or None,
    }
    try:
        with psycopg.connect(
            dbname="postgres", autocommit=True, connect_timeout=3, **conninfo
        ) as c:
            exists = c.execute("SELECT 1 FROM pg_database WHERE datname = %s", (cfg["NAME"],))
            if exists.fetchone() is None:
                c.execute(f'CREATE DATABASE "{cfg["NAME"]}"')
    except psycopg.OperationalError as exc:
        print(f"bench_workers needs PostgreSQL at {url}: {exc}")
        return False
    return True


def main() -> None:
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        url = DEFAULT_URL
    if not ensure_database(url):
        return
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_DEBUG", "0")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    sys.path.insert(0, str(REPO))
    import django

    django.setup()
    logging.getLogger("deadletter").setLevel(logging.WARNING)

    from django.conf import settings
    from django.core.management import call_command

    from deadletter.drain import Drainer
    from deadletter.models import QueuedMessage
    from deadletter.wire import codec, keys
    from deadletter.wire.gotime import GoTime
    from deadletter.wire.messages import Message

    call_command("migrate", verbosity=0)
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
        report = Drainer([QUEUE], workers=workers).run()
        elapsed = time.perf_counter() - start
        assert report.delivered == ROWS and not rows.exists(), report
        return elapsed

    one, four = [], []
    for _ in range(ROUNDS):
        one.append(timed(1))
        four.append(timed(4))
    rate1, rate4 = ROWS / min(one), ROWS / min(four)
    print(f"drain of {ROWS:,} messages on PostgreSQL, handler waits 5 ms, best of {ROUNDS} rounds")
    print(f"  1 worker   {rate1:8.1f} msgs/s")
    print(f"  4 workers  {rate4:8.1f} msgs/s")
    speedup = rate4 / rate1
    print(f"  speed-up   {speedup:8.2f}x  (goal >= 2.5x) {'OK' if speedup >= 2.5 else 'MISSED'}")


if __name__ == "__main__":
    main()
