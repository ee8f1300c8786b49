"""What a search costs at BENCH_ROWS rows (100,000 unless set) on the database
`DATABASE_URL` names (SQLite when unset): issue 44's bound on every query.

The rows are spread over 20 queues; each has a subject of 12 words drawn from a
vocabulary of 400 (`w0` ... `w399`), so every word of the 200-word phrase is in
about 3 % of the rows and the phrase in none; one row in ten has failed
(`Attempts` 1 to 4, a `LastError`). The index is built first (its rate printed).

Then each query through `search.keys_page`, the function the admin's change
list, the API's pages and the search across queues all call (a page of 50,
across every queue): the best of REPEAT runs, and what it answered (a full page,
the matches of a short one, or `SearchTooCostly`). Goal: each under 1 s.

Last, the backlog: every row marked pending again (as a load, a kv import or a
legacy split leaves them when no drain service runs), and the first search
afterwards: its time and how many rows it indexed (at most
`index.REQUEST_ROWS`), then the same for a search whose matches lie past the
pending rows it reads directly.
"""

from __future__ import annotations

import os
import random
import time

from _setup import django_on_fresh_database

ROWS = int(os.environ.get("BENCH_ROWS", "100000"))
REPEAT = int(os.environ.get("BENCH_REPEAT", "3"))
QUEUES = [f"queue-{i:02d}" for i in range(20)]
VOCABULARY = [f"w{i}" for i in range(400)]
PHRASE = '"' + " ".join(VOCABULARY[:200]) + '"'
SEARCHES = [
    ("200-word phrase (no match)", PHRASE),
    ("one word, 3 % of rows", "w7"),
    ("two words, never adjacent", '"w7 w7 w7"'),
    ("a word no row has", "nothingmatches"),
    ("attempts:>3 (10 % of 10 %)", "attempts:>3"),
    ("attempts:>9 (no row)", "attempts:>9"),
    ("age:>2d (no row)", "age:>2d"),
    ("after:> an hour ago (every row)", "age:<1h"),
    ("cause + a word", 'cause:"ConnectionError: timeout after # s" w3'),
    ("error:503 attempts:>=2", "error:503 attempts:>=2"),
]


def fill(total: int) -> None:
    from django.db import connection, transaction

    from deadletter.store import sql
    from deadletter.wire import codec, keys
    from deadletter.wire.gotime import GoTime
    from deadletter.wire.messages import Message

    chance = random.Random(44)
    insert = sql.statement(connection, "INSERT INTO {table} ({key}, value) VALUES (%s, %s)")
    batch: list[tuple[bytes, bytes]] = []
    for i in range(total):
        extra: dict[str, object] = {"order_id": i}
        if i % 10 == 0:
            extra.update(Attempts=1 + i // 10 % 4, LastError=f"HTTPError: 503 for {i}")
        msg = Message(
            subject=" ".join(chance.choices(VOCABULARY, k=12)),
            username="u@example.com",
            queued_at=GoTime.now(),
            extra=extra,
        )
        batch.append((keys.new_key(QUEUES[i % len(QUEUES)]), codec.encode_one(msg)))
        if len(batch) == 5000 or i == total - 1:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.executemany(insert, batch)
            batch.clear()


def build_index() -> int:
    """The postings and causes `search.index_pending` would write, in bulk: the set-up
    of what is measured, not the indexer's own rate (bench_admin prints that)."""
    from django.db import connection, transaction

    from deadletter.models import SearchTerm
    from deadletter.queue.search.index import cause_of
    from deadletter.queue.search.words import terms_of
    from deadletter.store import sql
    from deadletter.wire import codec

    select = sql.statement(
        connection, "SELECT {key}, value FROM {table} WHERE {key} > %s ORDER BY {key} LIMIT 5000"
    )
    clear = sql.statement(
        connection,
        "UPDATE {table} SET search_pending = NULL, signature = COALESCE(signature, %s) "
        "WHERE {key} = %s",
    )
    after, done = b"", 0
    while rows := sql.read(connection, select, (after,)):
        postings, settled = [], []
        for raw_key, value in rows:
            key = bytes(raw_key)
            msgs = codec.decode(bytes(value))
            postings.extend((key, term) for term in terms_of(msgs))
            settled.append((cause_of(key, msgs), key))
        with transaction.atomic(), connection.cursor() as cursor:
            sql.insert_new(connection, cursor, SearchTerm._meta.db_table, ("key", "term"), postings)
            cursor.executemany(clear, settled)
        after, done = bytes(rows[-1][0]), done + len(rows)
    return done


def timed(text: str) -> tuple[float, str]:
    from deadletter.queue import search

    best, said = float("inf"), ""
    for _ in range(REPEAT):
        started = time.perf_counter()
        try:
            found, more = search.keys_page(search.parse(text), queue=None, size=50)
            said = f"{len(found)} found" + (", more" if more else "")
        except search.SearchTooCostly:
            said = "refused (SearchTooCostly)"
        best = min(best, time.perf_counter() - started)
    return best, said


def main() -> None:
    vendor, _ = django_on_fresh_database("bench_search")
    from django.db import connection

    from deadletter.queue import search
    from deadletter.queue.search import index
    from deadletter.store import sql

    started = time.perf_counter()
    fill(ROWS)
    took = time.perf_counter() - started
    print(f"bench_search on {vendor}: filled {ROWS:,} rows in {took:.1f} s")
    started = time.perf_counter()
    indexed = build_index()
    took = time.perf_counter() - started
    print(f"indexed {indexed:,} rows in bulk in {took:.1f} s (the postings the indexer writes)")
    if vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    print(f"{'query':38} {'best ms':>9}  answer (MAX_CANDIDATES {search.MAX_CANDIDATES:,})")
    worst = 0.0
    for label, text in SEARCHES:
        best, said = timed(text)
        worst = max(worst, best)
        print(f"{label:38} {best * 1e3:9.1f}  {said}")
    print(f"slowest query at {ROWS:,} rows: {worst * 1e3:.1f} ms (goal < 1000 ms)")

    mark = sql.statement(connection, "UPDATE {table} SET search_pending = 1")
    for label, text in (("first search, a backlog", "w7"), ("then one matching late", "w399 w398")):
        with connection.cursor() as cursor:
            cursor.execute(mark)
        before = search.pending_count()
        started = time.perf_counter()
        try:
            found, _ = search.keys_page(search.parse(text), queue=None, size=50)
            said = f"{len(found)} found"
        except search.SearchTooCostly:
            said = "refused (SearchTooCostly)"
        took = time.perf_counter() - started
        done = before - search.pending_count()
        print(
            f"{label}: {before:,} pending, {took * 1e3:.1f} ms, indexed {done:,} "
            f"(REQUEST_ROWS {index.REQUEST_ROWS}), {said}"
        )


if __name__ == "__main__":
    main()
