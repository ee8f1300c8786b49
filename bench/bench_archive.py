"""Archived messages at 1,000 and at 1,000,000 entries over 20 queues: the admin's
change list (first page, one queue, the next page by cursor, filtered by reason
and by who, a search), an entry's page, and the API's first page.

Goal (issue 35): the change list's first page under 150 ms of server time at a
million entries, and no statement counts the archive. Prints, per page and
size, the best of REPEAT requests, wall clock and (in brackets) the process's
CPU time, the number of statements, and any COUNT of the archive. On SQLite, or
on PostgreSQL / MariaDB when DATABASE_URL names one. BENCH_ROWS overrides the
1,000,000. Entries: one in 50 by the drain (expired, max_attempts), the rest
deleted by one of five users; no entry is `unsealed`, so that filter looks
through its whole window and stops.
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


def entry(i: int, start: datetime) -> tuple[object, ...]:
    from deadletter.wire import codec, keys
    from deadletter.wire.gotime import GoTime
    from deadletter.wire.messages import Message

    queue = QUEUES[i % len(QUEUES)]
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


def fill(total: int) -> None:
    from django.db import connection, transaction

    start = datetime.now(UTC) - timedelta(seconds=total * 2)
    sql = (
        "INSERT INTO deadletter_archivedmessage "
        f"({connection.ops.quote_name('key')}, queue, value, reason, actor, archived_at, "
        "last_error) VALUES (%s, %s, %s, %s, %s, %s, %s)"
    )
    for low in range(0, total, BATCH):
        rows = [entry(i, start) for i in range(low, min(total, low + BATCH))]
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.executemany(sql, rows)
    with connection.cursor() as cursor:
        cursor.execute(
            "ANALYZE"
            if connection.vendor != "mysql"
            else "ANALYZE TABLE deadletter_archivedmessage"
        )


def main() -> None:
    vendor, _ = django_on_fresh_database("archive")
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.test import Client

    from deadletter.models import ArchivedMessage

    settings.ALLOWED_HOSTS = ["*"]
    User.objects.create_superuser("bench", password="bench")
    client = Client()
    client.login(username="bench", password="bench")

    def timed(url: str) -> tuple[float, float, int, list[str]]:
        return timed_get(
            client,
            url,
            REPEAT,
            lambda sql: bool(re.search(r"COUNT\(", sql, re.I)) and "archivedmessage" in sql,
        )

    def second_page() -> str:
        from deadletter.queue import archive_pages

        found = archive_pages.page(archive_pages.Filters(), None, 50)
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
    ]
    filled = 0
    results: dict[str, list[str]] = {label: [] for label, _ in pages}
    first_page_ms = 0.0
    for total in (SMALL, ROWS):
        started = time.perf_counter()
        fill(total - filled)
        filled = total
        print(
            f"{vendor}: filled {total:,} archive entries in {time.perf_counter() - started:.1f} s"
        )
        for label, url_of in pages:
            best, cpu, queries, counts = timed(url_of())
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
