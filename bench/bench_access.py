"""Per-queue access with a rule that is not a prefix (issue 44): the pages of a user
whose group's rule `*-billing` matches 10,000 queues, at BENCH_ROWS rows (default
1,000,000) over 20,000 queues (`t00000-billing`, `t00000-mail`, ...: the matched
and the others alternate), one archived entry per queue.

Goal: every admin page and API list under 1 s on each database, no statement that
grows with the queues matched (before: SQLite answered 500, "Expression tree is too
large", and the servers took 13 to 28 s). Prints, per page, the best of REPEAT
requests' wall clock and (in brackets) the process's CPU time, the statements of
one request and its longest statement in characters. The database is SQLite, or
the one `DATABASE_URL` names (PostgreSQL, MySQL/MariaDB). With BENCH_INDEX=1 the
search's index is filled first (`search.index_pending`), as the drain service
keeps it; by default the rows are left pending, as after a load: a search then
checks them directly, within its bound on candidates.
"""

from __future__ import annotations

import os
import struct
import time

from _setup import django_on_fresh_database

ROWS = int(os.environ.get("BENCH_ROWS", "1000000"))
QUEUES = 20_000
REPEAT = int(os.environ.get("BENCH_REPEAT", "3"))
BATCH = 5_000
CHANGELIST = "/admin/deadletter/queuedmessage/"
API = "/api/deadletter"


def name_of(q: int) -> str:
    return f"t{q // 2:05d}-{'billing' if q % 2 == 0 else 'mail'}"


def fill(total: int) -> None:
    """`total` rows, queue by queue in key order, the same small message in each."""
    from django.db import connection, transaction

    from deadletter.wire import codec
    from deadletter.wire.gotime import GoTime
    from deadletter.wire.messages import Message

    value = codec.encode_one(Message(subject="parcel lost", queued_at=GoTime.now()))
    per_queue = max(1, total // QUEUES)
    base = time.time_ns() - 10**12
    quoted = connection.ops.quote_name("key")
    sql = f"INSERT INTO deadletter_queuedmessage ({quoted}, value) VALUES (%s, %s)"
    batch: list[tuple[bytes, bytes]] = []
    for q in range(QUEUES):
        prefix = name_of(q).encode() + b"\x00"
        for j in range(per_queue):
            batch.append((prefix + struct.pack(">QQ", base + j, j), value))
            if len(batch) == BATCH:
                with transaction.atomic(), connection.cursor() as cursor:
                    cursor.executemany(sql, batch)
                batch = []
    if batch:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.executemany(sql, batch)


def archive_one_per_queue() -> None:
    from django.db import connection, transaction
    from django.utils import timezone

    from deadletter.wire import codec
    from deadletter.wire.messages import Message

    value = codec.encode_one(Message(subject="parcel lost"))
    quoted = connection.ops.quote_name("key")
    sql = (
        f"INSERT INTO deadletter_archivedmessage ({quoted}, queue, value, reason, actor, "
        "archived_at, last_error) VALUES (%s, %s, %s, %s, %s, %s, %s)"
    )
    now = timezone.now()
    rows = [
        (name_of(q).encode() + b"\x00" + struct.pack(">QQ", q, q), name_of(q), value)
        for q in range(QUEUES)
    ]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(sql, [(k, n, v, "deleted", "root", now, "") for k, n, v in rows])


def timed(client, url: str) -> tuple[float, float, int, int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    first = client.get(url)
    assert first.status_code == 200, (url, first.status_code)
    best = cpu = float("inf")
    for _ in range(REPEAT):
        start, start_cpu = time.perf_counter(), time.process_time()
        response = client.get(url)
        best = min(best, time.perf_counter() - start)
        cpu = min(cpu, time.process_time() - start_cpu)
        assert response.status_code == 200, url
    with CaptureQueriesContext(connection) as ctx:
        client.get(url)
    longest = max((len(q["sql"]) for q in ctx.captured_queries), default=0)
    return best, cpu, len(ctx.captured_queries), longest


def main() -> None:
    vendor, _ = django_on_fresh_database("access")
    from django.conf import settings
    from django.contrib.auth.models import Group, Permission, User
    from django.db import connection
    from django.test import Client

    from deadletter.models import QueueAccess
    from deadletter.queue import search

    settings.ALLOWED_HOSTS = ["*"]
    started = time.perf_counter()
    fill(ROWS)
    archive_one_per_queue()
    print(f"filled in {time.perf_counter() - started:.0f} s", flush=True)
    indexed = search.index_pending() if os.environ.get("BENCH_INDEX") == "1" else 0
    with connection.cursor() as cursor:
        if vendor == "mysql":
            cursor.execute("ANALYZE TABLE deadletter_queuedmessage, deadletter_archivedmessage")
        else:
            cursor.execute("ANALYZE")
    print(
        f"{vendor}: {ROWS:,} rows in {QUEUES:,} queues, {indexed:,} indexed, "
        f"filled in {time.perf_counter() - started:.0f} s"
    )
    user = User.objects.create_user("bob", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="deadletter"))
    team = Group.objects.create(name="billing")
    user.groups.add(team)
    QueueAccess.objects.create(group=team, queues="*-billing", retry=True, delete=True)
    client = Client()
    client.force_login(user)
    middle = name_of(QUEUES // 2).encode() + b"\x00" + struct.pack(">QQ", 0, 0)
    pages = [
        ("changelist", CHANGELIST),
        ("changelist, a page in the middle", f"{CHANGELIST}?after={middle.hex()}"),
        ("one granted queue", f"{CHANGELIST}?queue={name_of(QUEUES - 2)}"),
        ("one other queue (none shown)", f"{CHANGELIST}?queue={name_of(QUEUES - 1)}"),
        ("search, every row matches", f"{CHANGELIST}?q=parcel"),
        ("search, no row matches", f"{CHANGELIST}?q=nowhere"),
        ("overview", f"{CHANGELIST}overview/"),
        ("overview, a page in the middle", f"{CHANGELIST}overview/?after={name_of(QUEUES // 2)}"),
        ("archive", "/admin/deadletter/archivedmessage/"),
        ("GET queues/", f"{API}/queues/"),
        ("GET messages/", f"{API}/messages/"),
        ("GET messages/?q=parcel", f"{API}/messages/?q=parcel"),
        ("GET archive/", f"{API}/archive/"),
    ]
    print(f"{'page':38} {'best ms':>9} {'(cpu)':>9} {'stmts':>6} {'longest':>8}")
    for label, url in pages:
        best, cpu, statements, longest = timed(client, url)
        line = f"{label:38} {best * 1000:9.1f} {cpu * 1000:9.1f} {statements:6} {longest:8,}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
