"""Issues 2, 12 and 15: the queue's hot paths against the bare driver doing the same SQL.

Runs on a fresh SQLite file (WAL), or on a fresh PostgreSQL or MySQL/MariaDB
database when `DATABASE_URL` names a server (`<its database>_core`, dropped and
created), against raw sqlite3 / raw psycopg / raw mysqlclient in autocommit. Every figure is a ratio
measured side by side in one run (rounds interleaved, best round kept), so a
noisy shared machine shifts both sides alike. Two message shapes: Go's (its
eight keys) and a user's (Go's keys plus three of the user's own in `extra`,
about 300 bytes encoded). Rows and goals (SQLite; PostgreSQL and MySQL/MariaDB
in brackets):
  store    store_failed_msgs vs raw INSERT + commit    time, Go <= 2x, user <= 1.7x [<= 2x]
  dequeue  dequeue vs raw DELETE + commit              time <= 2x [<= 2x]
  scan     iter_failed_msgs over ROWS rows vs paged SELECT + cbor2.loads, each in a
           fresh process for its peak RSS              throughput >= 0.6x [>= 0.5x],
                                                       peak RSS growth < 100 MB (its own
                                                       pages: SQLite's mmap not counted)
  peek-N   the oldest N (10, 50, 100) of a ROWS-row queue vs SELECT ... LIMIT N +
           cbor2.loads                                 throughput >= 0.5x
  the same without the C speed-up (deadletter/wire/_speedups.c), no goals
  depth    store into a ROWS-row queue vs into an empty one     <= 1.2x
  cursor   the same INSERT / DELETE / page SELECT through Django's cursor (plain, with
           an execute_wrapper, with query logging) vs the driver's cursor: what
           Django's instrumentation costs a statement, no goals
BENCH_ROWS overrides the 1,000,000 rows; BENCH_QUICK=1 is a smoke run (20,000
rows, fewer and shorter rounds).
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from _setup import (
    REPO,
    anon_rss_bytes,
    commit_without_flush,
    django_on_fresh_database,
    raw_connection,
    raw_mysql_connection,
    raw_postgres_connection,
    require_speedups,
)

QUICK = os.environ.get("BENCH_QUICK") == "1"
ROWS = int(os.environ.get("BENCH_ROWS") or (20_000 if QUICK else 1_000_000))
OPS = 300 if QUICK else 3000
ROUNDS = 3 if QUICK else 15
SCAN_ROUNDS = 1 if QUICK else 4
PEEK_OPS = {10: 1000, 50: 400, 100: 200} if not QUICK else {10: 100, 50: 40, 100: 20}
CURSOR_SCAN_ROWS = min(ROWS, 200_000)
PAGE = 1000
TABLE = "deadletter_queuedmessage"
SHAPES = ("go", "user")
VENDORS = ("sqlite", "postgresql", "mysql")  # the order of each goal's figures
GOALS = {  # time ratios are "at most", throughput "at least"
    "store-go": (2.0, 2.0, 2.0),
    "store-user": (1.7, 2.0, 2.0),
    "dequeue": (2.0, 2.0, 2.0),
    "scan": (0.6, 0.5, 0.5),
    "peek": (0.5, 0.5, 0.5),
    "depth": (1.2, 1.2, 1.2),
}


def messages() -> dict[str, Any]:
    """Go's shape, and the same with keys of the user's own (about 300 bytes)."""
    from deadletter.wire.messages import Message

    go = Message(
        subject="Ocjena: Matematika",
        username="ucenik1@skole.hr",
        descriptions=["Datum", "Ocjena"],
        fields=["27.11.2026.", "5"],
        queued_at=datetime.now(UTC),
    )
    user = go.replace(
        extra={
            "endpoint": "https://hooks.example.com/v2/orders/notify",
            "order_id": 48213377,
            "error": "ReadTimeout: HTTPSConnectionPool(host='hooks.example.com')",
        }
    )
    return {"go": go, "user": user}


class Raw:
    """The baseline: the bare driver in autocommit doing the app's SQL."""

    def __init__(self, vendor: str, target: str, *, as_django: bool = False) -> None:
        self.vendor = vendor
        key = "key"
        if vendor == "sqlite":
            self.conn: Any = raw_connection(target)
            self.execute: Callable[..., Any] = self.conn.execute
            p = "?"
        elif vendor == "mysql":
            # MySQLdb's connection has no execute(): one cursor for every
            # statement, handed back for its rows as sqlite3's and psycopg's are.
            self.conn = raw_mysql_connection(target)
            cursor = self.conn.cursor()

            def execute(sql: str, params: Any = None) -> Any:
                cursor.execute(sql, params)
                return cursor

            self.execute = execute
            key = "`key`"  # a reserved word on MySQL
            p = "%s"
        else:
            self.conn = raw_postgres_connection(target, as_django=as_django)
            self.execute = self.conn.execute
            p = "%s"
        self.insert_sql = f"INSERT INTO {TABLE} ({key}, value) VALUES ({p}, {p})"
        self.delete_sql = f"DELETE FROM {TABLE} WHERE {key} = {p}"
        self.range_sql = (
            f"SELECT {key} FROM {TABLE} WHERE {key} >= {p} AND {key} < {p} ORDER BY {key}"
        )
        self.key = key
        self.p = p

    def page_sql(self, inclusive: bool, limit: int) -> str:
        op = ">=" if inclusive else ">"
        key, p = self.key, self.p
        return (
            f"SELECT {key}, value FROM {TABLE} WHERE {key} {op} {p} AND {key} < {p} "
            f"ORDER BY {key} LIMIT {limit}"
        )

    def keys_of(self, queue: str) -> list[bytes]:
        from deadletter.wire import keys

        return [bytes(r[0]) for r in self.execute(self.range_sql, keys.queue_bounds(queue))]

    def fill(self, queue: str, value: bytes, count: int) -> None:
        """`count` rows of `value` in `queue`, in bulk."""
        from deadletter.wire import keys

        for start in range(0, count, 50_000):
            rows = [(keys.new_key(queue), value) for _ in range(min(50_000, count - start))]
            if self.vendor == "sqlite":
                self.execute("BEGIN")
                self.conn.executemany(self.insert_sql, rows)
                self.execute("COMMIT")
            elif self.vendor == "mysql":
                # executemany sends multi-row INSERTs of up to 64 KiB each.
                self.execute("START TRANSACTION")
                self.conn.cursor().executemany(self.insert_sql, rows)
                self.execute("COMMIT")
            else:
                with (
                    self.conn.cursor() as cur,
                    cur.copy(f"COPY {TABLE} (key, value) FROM STDIN") as c,
                ):
                    for row in rows:
                        c.write_row(row)

    def settle(self) -> None:
        """After a bulk load: a checkpointed WAL (SQLite), fresh statistics and no
        dead tuples (PostgreSQL), fresh statistics (MySQL), so no side meets the
        load's leftovers."""
        if self.vendor == "sqlite":
            self.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        elif self.vendor == "mysql":
            self.execute(f"ANALYZE TABLE {TABLE}").fetchall()
        else:
            self.execute(f"VACUUM ANALYZE {TABLE}")


@contextlib.contextmanager
def codec_mode(python: bool) -> Iterator[None]:
    """With `python`, the codec's C speed-up switched off for the block."""
    from deadletter.wire import codec

    with codec.python_only() if python else contextlib.nullcontext():
        yield


def interleaved(variants: dict[str, Callable[[int], float]], rounds: int) -> dict[str, float]:
    """Best time of each variant over `rounds` rounds, each round running every
    variant once, the order rotated a step every round."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            times[name].append(variants[name](r))
    return {name: min(t) for name, t in times.items()}


def timed(fn: Callable[[], object], count: int, python: bool = False) -> float:
    with codec_mode(python):
        start = time.perf_counter()
        for _ in range(count):
            fn()
        return time.perf_counter() - start


def check(ratio: float, goal: float, at_most: bool) -> str:
    ok = ratio <= goal if at_most else ratio >= goal
    return f"(goal {'<=' if at_most else '>='} {goal:g}x) {'OK' if ok else 'MISSED'}"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--scan-child":
        scan_child(sys.argv[2], sys.argv[3], sys.argv[4])
        return
    vendor, target = django_on_fresh_database("core")
    pg, my = vendor == "postgresql", vendor == "mysql"
    goal = {name: goals[VENDORS.index(vendor)] for name, goals in GOALS.items()}

    import cbor2
    from django.db import connection

    # MySQL's flush at commit (innodb_flush_log_at_trx_commit) is the whole
    # server's setting, not the bench database's: left as the server has it.
    durable = not pg or os.environ.get("BENCH_PG_DURABLE") == "1"
    if not durable:
        commit_without_flush(target)

    from deadletter import queue as dlqueue
    from deadletter.queue import dequeue, iter_failed_msgs, store_failed_msgs
    from deadletter.wire import codec, keys

    require_speedups()
    msgs = messages()
    values = {shape: codec.encode_one(msg) for shape, msg in msgs.items()}
    raw = Raw(vendor, target)
    out: list[str] = []

    # --- store and dequeue ------------------------------------------------
    def app_store(queue: str, msg: Any, python: bool) -> Callable[[int], float]:
        return lambda r: timed(lambda: store_failed_msgs(queue, msg), OPS, python)

    def raw_store(queue: str, value: bytes) -> Callable[[int], float]:
        def run(r: int) -> float:
            batch = [keys.new_key(queue) for _ in range(OPS)]
            execute, sql = raw.execute, raw.insert_sql
            start = time.perf_counter()
            for key in batch:
                execute(sql, (key, value))
            return time.perf_counter() - start

        return run

    variants: dict[str, Callable[[int], float]] = {}
    for shape in SHAPES:
        variants[f"app-{shape}"] = app_store(f"app-{shape}", msgs[shape], False)
        variants[f"raw-{shape}"] = raw_store(f"raw-{shape}", values[shape])
        variants[f"py-{shape}"] = app_store(f"py-{shape}", msgs[shape], True)
    store = interleaved(variants, ROUNDS)

    def app_dequeue(batch_of: Callable[[int], list[bytes]]) -> Callable[[int], float]:
        def run(r: int) -> float:
            batch = iter(batch_of(r))
            return timed(lambda: dequeue(next(batch)), OPS)

        return run

    def raw_dequeue(batch_of: Callable[[int], list[bytes]]) -> Callable[[int], float]:
        def run(r: int) -> float:
            execute, sql = raw.execute, raw.delete_sql
            batch = batch_of(r)
            start = time.perf_counter()
            for key in batch:
                execute(sql, (key,))
            return time.perf_counter() - start

        return run

    def slices(queue: str) -> Callable[[int], list[bytes]]:
        all_keys = raw.keys_of(queue)
        assert len(all_keys) >= ROUNDS * OPS, (queue, len(all_keys))
        return lambda r: all_keys[r * OPS : (r + 1) * OPS]

    variants = {}
    for shape in SHAPES:
        variants[f"app-{shape}"] = app_dequeue(slices(f"app-{shape}"))
        variants[f"raw-{shape}"] = raw_dequeue(slices(f"raw-{shape}"))
    deq = interleaved(variants, ROUNDS)

    # --- Django's cursor against the driver's (issue 12) ----------------
    cursor = cursor_rows(connection, raw, values["go"])

    # --- the deep queues ----------------------------------------------------
    fill_start = time.perf_counter()
    for shape in SHAPES:
        raw.fill(f"deep-{shape}", values[shape], ROWS)
    # One row in a queue sorting after all of these, so that no store gets
    # SQLite's append-at-the-end-of-the-table shortcut: with several queues a
    # store lands inside the key order, whatever the depth of its queue.
    raw.execute(raw.insert_sql, (keys.new_key("~after-all"), values["go"]))
    raw.settle()
    fill_time = time.perf_counter() - fill_start

    # --- peek: the oldest N of a deep queue ----------------------------------
    fetch = dlqueue.fetch_failed_msgs
    if "limit" in inspect.signature(fetch).parameters:
        peek_how = "fetch_failed_msgs(queue, limit=N)"

        def peek(queue: str, n: int) -> list[Any]:
            return fetch(queue, limit=n)  # type: ignore[call-arg]

    else:
        peek_how = "list(islice(iter_failed_msgs(queue, batch_size=N), N))"

        def peek(queue: str, n: int) -> list[Any]:
            return list(itertools.islice(iter_failed_msgs(queue, batch_size=n), n))

    def app_peek(queue: str, n: int, python: bool) -> Callable[[int], float]:
        def run(r: int) -> float:
            assert len(peek(queue, n)) == n
            return timed(lambda: peek(queue, n), PEEK_OPS[n], python)

        return run

    def raw_peek(queue: str, n: int) -> Callable[[int], float]:
        bounds = keys.queue_bounds(queue)
        sql, execute, loads = raw.page_sql(True, n), raw.execute, cbor2.loads

        def once() -> list[Any]:
            return [loads(value) for _key, value in execute(sql, bounds).fetchall()]

        def run(r: int) -> float:
            assert len(once()) == n
            return timed(once, PEEK_OPS[n])

        return run

    peeks: dict[int, dict[str, float]] = {}
    for n in PEEK_OPS:
        variants = {}
        for shape in SHAPES:
            variants[f"app-{shape}"] = app_peek(f"deep-{shape}", n, False)
            variants[f"raw-{shape}"] = raw_peek(f"deep-{shape}", n)
            variants[f"py-{shape}"] = app_peek(f"deep-{shape}", n, True)
        peeks[n] = interleaved(variants, ROUNDS)

    # --- scan: each side in its own fresh process, so peak RSS is its own ----
    def child(mode: str) -> dict[str, Any]:
        result = subprocess.run(
            [sys.executable, __file__, "--scan-child", vendor, target, mode],
            check=True,
            capture_output=True,
            text=True,
            cwd=REPO,
            env=dict(os.environ),
        )
        return json.loads(result.stdout.strip().splitlines()[-1])

    modes = [f"{side}-{shape}" for shape in SHAPES for side in ("app", "raw", "py")]
    scan_runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    for r in range(SCAN_ROUNDS):
        k = r % len(modes)
        for mode in modes[k:] + modes[:k]:
            scan_runs[mode].append(child(mode))
    scans = {mode: max(runs, key=lambda run: run["rate"]) for mode, runs in scan_runs.items()}

    # --- depth: stores into the deep queue against stores into an empty one ---
    depth = interleaved(
        {
            "deep": lambda r: timed(lambda: store_failed_msgs("deep-go", msgs["go"]), OPS),
            "empty": lambda r: timed(lambda: store_failed_msgs(f"empty-{r}", msgs["go"]), OPS),
        },
        ROUNDS,
    )

    # --- report ----------------------------------------------------------------
    name = "PostgreSQL" if pg else "SQLite (WAL, synchronous=NORMAL, mmap)"
    base = {
        "sqlite": "raw sqlite3 (autocommit)",
        "postgresql": "raw psycopg (autocommit)",
        "mysql": "raw mysqlclient (autocommit)",
    }[vendor]
    if pg:
        server = raw.execute("SHOW server_version").fetchone()[0]
        commit = raw.execute("SHOW synchronous_commit").fetchone()[0]
        name = (
            f"PostgreSQL {server} (synchronous_commit={commit} on the bench database"
            f"{'' if durable else '; BENCH_PG_DURABLE=1 keeps the server default'})"
        )
    if my:
        server = raw.execute("SELECT VERSION()").fetchone()[0]
        flush = raw.execute("SELECT @@innodb_flush_log_at_trx_commit").fetchone()[0]
        engine = "MariaDB" if "mariadb" in server.lower() else "MySQL"
        name = f"{engine} {server} (innodb_flush_log_at_trx_commit={flush}, the server's own)"
    out.append(f"bench_core on {name} against {base}, same SQL, same database")
    out.append(
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {ROWS:,} rows per deep queue (filled in "
        f"{fill_time:.0f} s); {OPS:,} ops a round, best of {ROUNDS} interleaved rounds; "
        f"scans best of {SCAN_ROUNDS}{'; BENCH_QUICK' if QUICK else ''}"
    )
    out.append(
        f"shapes: go = Go's eight keys, {len(values['go'])} bytes encoded; user = Go's keys "
        f"+ {len(msgs['user'].extra)} of the user's own ({', '.join(msgs['user'].extra)}), "
        f"{len(values['user'])} bytes"
    )
    if pg:
        out.append(
            "raw psycopg keeps the driver's defaults (server-side binding, a statement "
            f"prepared after {raw.conn.prepare_threshold} runs); Django's connection binds "
            "client-side and prepares nothing (its default OPTIONS)"
        )
    if my:
        out.append(
            "raw mysqlclient and Django's connection are the same driver, both binding "
            "client-side (parameters escaped into the statement's text)"
        )
    out.append(f"peek reads with {peek_how}")
    out.append("peak RSS growth counts a process's own pages (RssAnon), not SQLite's mmap")
    out.append("")
    out.append("with the C speed-up                                              ratio")

    def us(seconds: float, count: int = OPS) -> str:
        return f"{seconds / count * 1e6:7.1f} us"

    for shape in SHAPES:
        ratio = store[f"app-{shape}"] / store[f"raw-{shape}"]
        out.append(
            f"  store   {shape:4}  app {us(store[f'app-{shape}'])}  raw INSERT+commit "
            f"{us(store[f'raw-{shape}'])}   time {ratio:5.2f}x  "
            f"{check(ratio, goal[f'store-{shape}'], True)}"
        )
    for shape in SHAPES:
        ratio = deq[f"app-{shape}"] / deq[f"raw-{shape}"]
        out.append(
            f"  dequeue {shape:4}  app {us(deq[f'app-{shape}'])}  raw DELETE+commit "
            f"{us(deq[f'raw-{shape}'])}   time {ratio:5.2f}x  {check(ratio, goal['dequeue'], True)}"
        )
    for shape in SHAPES:
        app, rawscan = scans[f"app-{shape}"], scans[f"raw-{shape}"]
        ratio = app["rate"] / rawscan["rate"]
        out.append(
            f"  scan    {shape:4}  iter_failed_msgs {app['rate']:9,.0f} msg/s  raw SELECT+loads "
            f"{rawscan['rate']:9,.0f} msg/s   throughput {ratio:4.2f}x  "
            f"{check(ratio, goal['scan'], False)}"
        )
        out.append(
            f"                peak RSS growth {app['rss_growth'] / 2**20:.1f} MB "
            f"(goal < 100 MB) {'OK' if app['rss_growth'] < 100 * 2**20 else 'MISSED'}; "
            f"raw {rawscan['rss_growth'] / 2**20:.1f} MB; {app['count']:,} messages"
        )
    for n, times in peeks.items():
        for shape in SHAPES:
            ratio = times[f"raw-{shape}"] / times[f"app-{shape}"]
            out.append(
                f"  peek-{n:<3} {shape:4} app {us(times[f'app-{shape}'], PEEK_OPS[n])}  raw "
                f"SELECT LIMIT {n}+loads {us(times[f'raw-{shape}'], PEEK_OPS[n])}   "
                f"throughput {ratio:4.2f}x  {check(ratio, goal['peek'], False)}"
            )
    ratio = depth["deep"] / depth["empty"]
    out.append(
        f"  depth   go    store into the {ROWS:,}-row queue {us(depth['deep'])}, into an empty "
        f"one {us(depth['empty'])}   time {ratio:5.2f}x  {check(ratio, goal['depth'], True)}"
    )
    out.append("")
    out.append("without the C speed-up (pure Python codec), same raw figures, no goals")
    for shape in SHAPES:
        out.append(
            f"  store   {shape:4}  app {us(store[f'py-{shape}'])}   time "
            f"{store[f'py-{shape}'] / store[f'raw-{shape}']:5.2f}x"
        )
    out.append("  dequeue       decodes nothing: the rows above")
    for shape in SHAPES:
        py, rawscan = scans[f"py-{shape}"], scans[f"raw-{shape}"]
        out.append(
            f"  scan    {shape:4}  iter_failed_msgs {py['rate']:9,.0f} msg/s   throughput "
            f"{py['rate'] / rawscan['rate']:4.2f}x; "
            f"peak RSS growth {py['rss_growth'] / 2**20:.1f} MB"
        )
    for n, times in peeks.items():
        for shape in SHAPES:
            out.append(
                f"  peek-{n:<3} {shape:4} app {us(times[f'py-{shape}'], PEEK_OPS[n])}   "
                f"throughput {times[f'raw-{shape}'] / times[f'py-{shape}']:4.2f}x"
            )
    out.append("")
    out.extend(cursor)
    print("\n".join(out))


def cursor_rows(connection: Any, raw: Raw, value: bytes) -> list[str]:
    """Issue 12: one INSERT, one DELETE and a scan's pages through Django's cursor
    (plain, with an execute_wrapper, with query logging) against the driver's
    cursor on the same connection; lines to print."""
    from deadletter.wire import codec, keys

    table = connection.ops.quote_name(TABLE)
    key = raw.key
    django_insert = f"INSERT INTO {table} ({key}, value) VALUES (%s, %s)"
    django_delete = f"DELETE FROM {table} WHERE {key} = %s"
    p = "?" if connection.vendor == "sqlite" else "%s"
    driver_insert = django_insert.replace("%s", p)
    driver_delete = django_delete.replace("%s", p)
    kinds = ("driver", "django", "wrapper", "logged")

    def passthrough(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        return execute(sql, params, many, context)

    @contextlib.contextmanager
    def watching(kind: str) -> Iterator[None]:
        if kind == "wrapper":
            with connection.execute_wrapper(passthrough):
                yield
        elif kind == "logged":
            connection.force_debug_cursor = True
            try:
                yield
            finally:
                connection.force_debug_cursor = False
                connection.queries_log.clear()
        else:
            yield

    def run_sql(kind: str, django_sql: str, driver_sql: str) -> Callable[[tuple], None]:
        if kind == "driver":

            def on_driver(params: tuple) -> None:
                cursor = connection.connection.cursor()
                try:
                    cursor.execute(driver_sql, params)
                finally:
                    cursor.close()

            return on_driver

        def on_django(params: tuple) -> None:
            with connection.cursor() as cursor:
                cursor.execute(django_sql, params)

        return on_django

    connection.ensure_connection()

    def store(kind: str) -> Callable[[int], float]:
        do = run_sql(kind, django_insert, driver_insert)

        def run(r: int) -> float:
            batch = [(keys.new_key(f"cursor-{kind}"), value) for _ in range(OPS)]
            with watching(kind):
                start = time.perf_counter()
                for params in batch:
                    do(params)
                return time.perf_counter() - start

        return run

    stores = interleaved({kind: store(kind) for kind in kinds}, ROUNDS)

    def delete(kind: str) -> Callable[[int], float]:
        do = run_sql(kind, django_delete, driver_delete)
        all_keys = raw.keys_of(f"cursor-{kind}")

        def run(r: int) -> float:
            batch = [(key,) for key in all_keys[r * OPS : (r + 1) * OPS]]
            with watching(kind):
                start = time.perf_counter()
                for params in batch:
                    do(params)
                return time.perf_counter() - start

        return run

    deletes = interleaved({kind: delete(kind) for kind in kinds}, ROUNDS)

    # The scan: pages of PAGE rows of a queue of CURSOR_SCAN_ROWS, each row decoded.
    raw.fill("cursor-scan", value, CURSOR_SCAN_ROWS)
    raw.settle()
    low, high = keys.queue_bounds("cursor-scan")

    def scan(kind: str) -> Callable[[int], float]:
        def page_sql(inclusive: bool, for_driver: bool) -> str:
            sql = (
                f"SELECT {key}, value FROM {table} WHERE {key} {'>=' if inclusive else '>'} %s "
                f"AND {key} < %s ORDER BY {key} LIMIT {PAGE}"
            )
            return sql.replace("%s", p) if for_driver else sql

        def run(r: int) -> float:
            decode, count = codec.decode_single, 0
            with watching(kind):
                start = time.perf_counter()
                after, inclusive = low, True
                while True:
                    if kind == "driver":
                        cursor = connection.connection.cursor()
                        try:
                            cursor.execute(page_sql(inclusive, True), (after, high))
                            rows = cursor.fetchall()
                        finally:
                            cursor.close()
                    else:
                        with connection.cursor() as cursor:
                            cursor.execute(page_sql(inclusive, False), (after, high))
                            rows = cursor.fetchall()
                    for _key, row_value in rows:
                        decode(row_value)
                    count += len(rows)
                    if len(rows) < PAGE:
                        break
                    after, inclusive = rows[-1][0], False
                elapsed = time.perf_counter() - start
            assert count == CURSOR_SCAN_ROWS, count
            return elapsed

        return run

    scans = interleaved({kind: scan(kind) for kind in kinds}, max(3, ROUNDS // 3))
    pages = -(-CURSOR_SCAN_ROWS // PAGE)
    lines = [
        "Django's cursor vs the driver's cursor (connection.connection.cursor()), same SQL, "
        "same connection, autocommit; time ratio to the driver",
        "  django = connection.cursor(); + wrapper = with a pass-through execute_wrapper; "
        "logged = force_debug_cursor (queries logged, as under DEBUG)",
    ]
    for label, times, count, unit in (
        ("store   INSERT", stores, OPS, "statement"),
        ("dequeue DELETE", deletes, OPS, "statement"),
        (f"scan    {CURSOR_SCAN_ROWS:,} rows", scans, pages, f"page of {PAGE} + decode"),
    ):
        base = times["driver"]
        lines.append(
            f"  {label}: driver {base / count * 1e6:.1f} us/{unit}; "
            + "; ".join(
                f"{kind} {times[kind] / count * 1e6:.1f} us {times[kind] / base:.2f}x "
                f"({(times[kind] - base) / count * 1e6:+.1f} us)"
                for kind in kinds[1:]
            )
        )
    return lines


def scan_child(vendor: str, target: str, mode: str) -> None:
    """Scan one deep queue once; print JSON with the count, the rate and the peak RSS growth."""
    side, shape = mode.split("-")
    queue = f"deep-{shape}"
    sys.path.insert(0, str(REPO))
    if side in ("app", "py"):
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
        import django

        django.setup()
        from django.db import connection

        connection.ensure_connection()
        from deadletter.queue import iter_failed_msgs

        if side == "app":
            require_speedups()
    else:
        import cbor2

        from deadletter.wire import keys

        raw = Raw(vendor, target)
    base = anon_rss_bytes()
    peak = [base]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], anon_rss_bytes())
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    count = 0
    if side in ("app", "py"):
        with codec_mode(side == "py"):
            for _ in iter_failed_msgs(queue):
                count += 1
    else:
        low, high = keys.queue_bounds(queue)
        after, inclusive = low, True
        execute, loads = raw.execute, cbor2.loads
        first, following = raw.page_sql(True, PAGE), raw.page_sql(False, PAGE)
        while True:
            rows = execute(first if inclusive else following, (after, high)).fetchall()
            for _key, value in rows:
                for _msg in loads(value):
                    count += 1
            if len(rows) < PAGE:
                break
            after, inclusive = rows[-1][0], False
    elapsed = time.perf_counter() - start
    stop.set()
    sampler.join()
    peak[0] = max(peak[0], anon_rss_bytes())
    print(json.dumps({"count": count, "rate": count / elapsed, "rss_growth": peak[0] - base}))


if __name__ == "__main__":
    main()
