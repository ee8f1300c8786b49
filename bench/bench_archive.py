"""Archived messages at 1,000 and at 1,000,000 entries over 20 queues: the admin's
change list (first page, one queue, the next page by cursor, filtered by reason
and by who, a search), an entry's page, and the API's first page.

Goal (issue 35): the change list's first page under 150 ms of server time at a
million entries, and no statement counts the archive. Prints, per page and
size, the best of REPEAT requests, wall clock and (in brackets) the process's
CPU time, the number of statements, and any unbounded COUNT of the archive (a
count of a window, `LIMIT n` inside, is bounded). On SQLite, or
on PostgreSQL / MariaDB when DATABASE_URL names one. BENCH_ROWS overrides the
1,000,000. Entries: one in 50 by the drain (expired, max_attempts), the rest
deleted by one of five users; no entry is `unsealed`, so that filter looks
through its whole window and stops.

With a QueueAccess rule in force (issue 37): `team` is kept to `queue-0*` and
`queue-1[37]` (12 of the 20 queues), `auditor` to `audit`, a queue of 20
entries older than all the others; their first and next pages, a reason filter
and the API's first page (each page full: `auditor`'s holds the 20 entries).
"""

from __future__ import annotations

import os
import re
import time
from datetime import UTC, datetime, timedelta

from _setup import django_on_fresh_database, timed_get

ROWS = int(os.environ.get("BENCH_ROWS", "1000000"))
SMALL = 1000
QUEUES = [f"queue-{i:02d}" for i in range(20)]
USERS = ["alice", "bob", "carol", "dave", "erin"]
REPEAT = 7
ARCHIVE = "/admin/deadletter/archivedmessage/"
BATCH = 10_000


def entry(i: int, start: datetime, queue: str | None = None) -> tuple[object, ...]:
    from deadletter.wire import codec, keys
    from deadletter.wire.gotime import GoTime
    from deadletter.wire.messages import Message

    queue = queue or QUEUES[i % len(QUEUES)]
    error = f"HTTPError: 503 for order {i}"
    msg = Message(
        subject=f"Narudžba {i} nije isporučena",
        username="u@skole.hr",
        queued_at=GoTime.now(),
        extra={"order_id": i, "Attempts": 3, "LastError": error},
    )
    drained = i % 50 == 0
    reason = ("expired" if i % 100 == 0 else "max_attempts") if drained else "deleted"
    actor = "drain" if drained else USERS[i % len(USERS)]
    at = start + timedelta(seconds=i * 2)
    return (keys.new_key(queue), queue, codec.encode_one(msg), reason, actor, at, error)


def insert(rows: list[tuple[object, ...]]) -> None:
    from django.db import connection, transaction

    sql = (
        "INSERT INTO deadletter_archivedmessage "
        f"({connection.ops.quote_name('key')}, queue, value, reason, actor, archived_at, "
        "last_error) VALUES (%s, %s, %s, %s, %s, %s, %s)"
    )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(sql, rows)


def fill(total: int) -> None:
    from django.db import connection

    start = datetime.now(UTC) - timedelta(seconds=total * 2)
    for low in range(0, total, BATCH):
        insert([entry(i, start) for i in range(low, min(total, low + BATCH))])
    with connection.cursor() as cursor:
        cursor.execute(
            "ANALYZE"
            if connection.vendor != "mysql"
            else "ANALYZE TABLE deadletter_archivedmessage"
        )


AUDIT = 20


def fill_audit(before: int) -> None:
    """`AUDIT` entries of the queue `audit`, archived before the `before` others."""
    start = datetime.now(UTC) - timedelta(seconds=before * 2 + 3600)
    insert([entry(i, start, queue="audit") for i in range(AUDIT)])


def restricted_users() -> None:
    """`team` (queue-0* and queue-1[37]) and `auditor` (audit), staff who may view
    the archive."""
    from django.contrib.auth.models import Permission, User

    from deadletter.models import QueueAccess

    for name, patterns in (("team", ["queue-0*", "queue-1[37]"]), ("auditor", ["audit"])):
        user = User.objects.create_user(name, password=name, is_staff=True)
        user.user_permissions.add(Permission.objects.get(codename="view_archivedmessage"))
        for pattern in patterns:
            QueueAccess.objects.create(user=user, queues=pattern)


def main() -> None:
    vendor, _ = django_on_fresh_database("archive")
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.test import Client

    from deadletter.models import ArchivedMessage

    settings.ALLOWED_HOSTS = ["*"]
    User.objects.create_superuser("bench", password="bench")
    restricted_users()
    clients = {}
    for name in ("bench", "team", "auditor"):
        clients[name] = Client()
        clients[name].login(username=name, password=name)

    def timed(url: str, user: str = "bench") -> tuple[float, float, int, list[str]]:
        return timed_get(
            clients[user],
            url,
            REPEAT,
            lambda sql: (
                bool(re.search(r"COUNT\(", sql, re.I))
                and "archivedmessage" in sql
                and not re.search(r"\bLIMIT\b", sql, re.I)
            ),
        )

    def second_page(user: str | None = None) -> str:
        from deadletter.queue import access, archive_pages

        within = None if user is None else access.scope_of(User.objects.get(username=user))
        found = archive_pages.page(archive_pages.Filters(within=within), None, 50)
        return f"{ARCHIVE}?cursor={found.next}"

    def an_entry() -> str:
        newest = ArchivedMessage.objects.order_by("-archived_at", "-id").values_list("id")[:1]
        return f"{ARCHIVE}{newest[0][0]}/change/"

    pages = [
        ("first page", lambda: ARCHIVE),
        ("one queue", lambda: f"{ARCHIVE}?queue=queue-07"),
        ("next page", second_page),
        ("reason deleted", lambda: f"{ARCHIVE}?reason=deleted"),
        ("reason rare", lambda: f"{ARCHIVE}?reason=unsealed"),
        ("who: drain", lambda: f"{ARCHIVE}?actor=drain"),
        ("search", lambda: f"{ARCHIVE}?q=subject%3Aisporu%C4%8Dena"),
        ("search none", lambda: f"{ARCHIVE}?q=nothingmatches"),
        ("entry page", an_entry),
        ("API page", lambda: "/api/deadletter/archive/"),
        ("API one queue", lambda: "/api/deadletter/archive/?queue=queue-07"),
        ("team: first", lambda: ARCHIVE, "team"),
        ("team: next", lambda: second_page("team"), "team"),
        ("team: reason", lambda: f"{ARCHIVE}?reason=unsealed", "team"),
        ("team: API", lambda: "/api/deadletter/archive/", "team"),
        ("audit: first", lambda: ARCHIVE, "auditor"),
        ("audit: API", lambda: "/api/deadletter/archive/", "auditor"),
    ]
    filled = 0
    results: dict[str, list[str]] = {label: [] for label, *_ in pages}
    first_page_ms = 0.0
    fill_audit(ROWS)
    for total in (SMALL, ROWS):
        started = time.perf_counter()
        fill(total - filled)
        filled = total
        print(
            f"{vendor}: filled {total:,} archive entries in {time.perf_counter() - started:.1f} s"
        )
        for label, url_of, *user in pages:
            best, cpu, queries, counts = timed(url_of(), *user)
            cell = f"{total:>9,} {best * 1e3:6.1f} ms ({cpu * 1e3:5.1f}) {queries:2d} q"
            if counts:
                cell += f" COUNT: {counts}"
            results[label].append(cell)
            if total == ROWS and label == "first page":
                first_page_ms = best * 1e3
    for label, cells in results.items():
        print(f"{label:15s} " + "  ".join(cells))
    print(
        f"{vendor}: the archive's first page at {ROWS:,} entries: {first_page_ms:.1f} ms"
        " (goal < 150 ms)"
    )


if __name__ == "__main__":
    main()
