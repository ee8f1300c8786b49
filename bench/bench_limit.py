"""Issue 26: the per-message paths against the physical limit, side by side in one process.

The anchor is the bare driver (raw sqlite3, psycopg or mysqlclient in autocommit,
psycopg binding client-side and preparing nothing, as Django's connection does)
plus cbor2, doing the same SQL on the same table with the same message: a
user's failure as a dict (subject, username, timestamp text, endpoint, error,
three descriptions, three fields, a code), which the app side maps to a
`Message` with the user's own keys as `extra` and the raw side maps to Go's
map with the same keys. Each path runs `OPS` messages a round, app, raw and
the app without its C speed-up ("py") in turn, the order rotated every round;
the figure is the median over `ROUNDS` rounds of each round's ratio, with the
lowest and highest round beside it.

  park      store_failed_msgs(queue, Message(...))         vs key + cbor2.dumps + INSERT
  take      iter_failed_msgs(batch_size=1) -> handler -> dequeue
                                                           vs SELECT LIMIT 1 + loads + handler
                                                              + DELETE, one message at a time
  drain     Drainer([queue]).run() over the queue          vs pages of 500 + loads + handler
                                                              + DELETE (SQLite); a server
                                                              claims each row FOR UPDATE
                                                              SKIP LOCKED in the transaction
                                                              that deletes it
  read-10   fetch_failed_msgs(queue, limit=10)             vs SELECT LIMIT 10 + loads
  dequeue   dequeue(key)                                   vs DELETE
  scan      iter_failed_msgs over SCAN_ROWS rows           vs pages of 1000 + loads

Ratios are throughput (raw time / app time: 1.0 is the driver's own speed).
Goals: SQLite park >= 0.7, take >= 0.7, drain >= 0.8, read-10 >= 0.9;
PostgreSQL and MySQL/MariaDB park and dequeue within 1.3x the raw time
(throughput >= 0.77), scan >= 0.9. The "py" figures have no goal.

Two shapes (BENCH_SHAPES=shared,apart): "shared" is the above, the queue on the
default alias; "apart" is a site that keeps its dead letters apart, the queue
on its own alias (`DEADLETTER_DATABASE`, a database of its own) beside the
site's default connection, take and read-10 through `iter_failed_msgs`, park,
take, drain and read-10 only, against a raw side that runs only the SQL and
cbor2 (Go's map built once: no mapping, no stamping, no handler), with the
same goals.

`--profile` prints a cProfile of PROFILE_OPS parks instead (the closing note's
before/after). BENCH_ROUNDS, BENCH_OPS override the rounds (15) and ops (2,000);
BENCH_PATHS=park,read-10 runs only those paths; BENCH_QUICK=1 is a smoke run;
BENCH_CLOCK=cpu times this thread's CPU instead of the wall clock (SQLite only,
for a busy machine); BENCH_DB_SUFFIX names a server run's databases apart from
another run's at the same time.
"""

from __future__ import annotations

import contextlib
import cProfile
import logging
import os
import pstats
import statistics
import struct
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from _setup import APART, commit_without_flush, django_on_fresh_databases, require_speedups
from bench_core import TABLE, Raw

QUICK = os.environ.get("BENCH_QUICK") == "1"
ROUNDS = int(os.environ.get("BENCH_ROUNDS") or (3 if QUICK else 15))
OPS = int(os.environ.get("BENCH_OPS") or (300 if QUICK else 2000))
SCAN_ROWS = 2000 if QUICK else 20_000
PROFILE_OPS = 3000
PATHS = ("park", "take", "drain", "read-10", "dequeue", "scan")
CHOSEN = tuple(filter(None, (os.environ.get("BENCH_PATHS") or ",".join(PATHS)).split(",")))
# BENCH_CLOCK=cpu: this thread's CPU time instead of the wall clock, for SQLite on a
# busy machine (the database runs in this process; a server's work would not count).
clock = time.thread_time if os.environ.get("BENCH_CLOCK") == "cpu" else time.perf_counter
SHAPES = tuple(filter(None, (os.environ.get("BENCH_SHAPES") or "shared,apart").split(",")))
DRAIN_BATCH = 500
SCAN_PAGE = 1000
VENDORS = ("sqlite", "postgresql", "mysql")
# Throughput goals (raw time / app time at least this), per vendor; None: no goal.
GOALS: dict[str, tuple[float | None, float | None, float | None]] = {
    "park": (0.7, 1 / 1.3, 1 / 1.3),
    "take": (0.7, None, None),
    "drain": (0.8, None, None),
    "read-10": (0.9, None, None),
    "dequeue": (None, 1 / 1.3, 1 / 1.3),
    "scan": (None, 0.9, 0.9),
}

FAILURE: dict[str, Any] = {
    "subject": "Order 48213377: webhook not delivered",
    "username": "shop-notifier@example.com",
    "timestamp": "2026-11-27T10:15:02.123456789+01:00",
    "endpoint": "https://hooks.example.com/v2/orders/notify",
    "error": "ReadTimeout: HTTPSConnectionPool(host='hooks.example.com', port=443)",
    "descriptions": ["Order", "Amount", "Status"],
    "fields": ["48213377", "129.90 EUR", "paid"],
    "code": 2,
}


def app_message(failure: dict[str, Any]) -> Any:
    """The user's mapping on the app side: Go's fields, the rest as extra keys."""
    from deadletter.wire.gotime import GoTime
    from deadletter.wire.messages import Message

    return Message(
        subject=failure["subject"],
        username=failure["username"],
        timestamp=GoTime.parse(failure["timestamp"]),
        descriptions=list(failure["descriptions"]),
        fields=list(failure["fields"]),
        code=failure["code"],
        extra={"endpoint": failure["endpoint"], "error": failure["error"]},
    )


def raw_map(failure: dict[str, Any], queued_at: str) -> dict[str, Any]:
    """The same mapping on the raw side: Go's map, its eight keys in order, then the user's."""
    return {
        "Timestamp": failure["timestamp"],
        "QueuedAt": queued_at,
        "Username": failure["username"],
        "Subject": failure["subject"],
        "Descriptions": list(failure["descriptions"]),
        "Fields": list(failure["fields"]),
        "SkipRecipients": None,
        "Code": failure["code"],
        "endpoint": failure["endpoint"],
        "error": failure["error"],
    }


def handle(msg: Any) -> None:
    """The app's handler: it reads the message and succeeds."""
    len(msg.subject)


def raw_handle(item: dict[str, Any]) -> None:
    """The same on the raw side's decoded map."""
    len(item["Subject"])


class Rounds:
    """Variants run in turn, the order rotated a step each round, each after
    `between` (SQLite: the WAL checkpointed, so no variant pays for another's
    writes); the times of every round, for per-round ratios."""

    def __init__(self, rounds: int, between: Callable[[], None]) -> None:
        self.rounds = rounds
        self.between = between

    def run(
        self,
        variants: dict[str, Callable[[int], float]],
        before_round: Callable[[int], None] | None = None,
    ) -> dict[str, list[float]]:
        times: dict[str, list[float]] = {name: [] for name in variants}
        names = list(variants)
        for r in range(self.rounds):
            if before_round is not None:
                before_round(r)
            k = r % len(names)
            for name in names[k:] + names[:k]:
                self.between()
                times[name].append(variants[name](r))
        return times


def ratio_line(name: str, times: dict[str, list[float]], ops: int, goal: float | None) -> str:
    """Median and spread of raw/app per round, for app and py, against the goal."""
    raw = times["raw"]
    out = []
    for side in ("app", "py"):
        per_round = [r / a for r, a in zip(raw, times[side], strict=True)]
        median = statistics.median(per_round)
        spread = f"{min(per_round):.2f}-{max(per_round):.2f}"
        text = f"{side} {median:.2f}x [{spread}]"
        if side == "app" and goal is not None:
            text += f" (goal >= {goal:.2f}x) {'OK' if median >= goal else 'MISSED'}"
        out.append(text)
    us = {side: statistics.median(t) / ops * 1e6 for side, t in times.items()}
    return (
        f"  {name:<8} {out[0]:<44} {out[1]:<24} "
        f"us/msg app {us['app']:.1f}, raw {us['raw']:.1f}, py {us['py']:.1f}"
    )


def timed(fn: Callable[[], object], count: int, python: bool = False) -> float:
    """Seconds for `count` calls of `fn` (without the C speed-up when `python`)."""
    from deadletter.wire import codec

    with codec.python_only() if python else contextlib.nullcontext():
        start = clock()
        for _ in range(count):
            fn()
        return clock() - start


class Anchor:
    """The raw side's loops on `raw`: the SQL and cbor2's work, with `handler` on
    each decoded map when one is given (the shared shape's mapping)."""

    def __init__(self, raw: Raw, handler: Callable[[dict[str, Any]], None] | None) -> None:
        import cbor2

        self.raw, self.handler, self.loads = raw, handler, cbor2.loads
        self.dumps, self.pack, self.seq = cbor2.dumps, struct.Struct(">QQ").pack, 1 << 40

    def park(self, queue: str, make_row: Callable[[], list[dict[str, Any]]]) -> Callable[[], None]:
        prefix, execute, sql, dumps = (
            queue.encode() + b"\x00",
            self.raw.execute,
            self.raw.insert_sql,
            self.dumps,
        )

        def once() -> None:
            self.seq += 1 << 16
            execute(sql, (prefix + self.pack(time.time_ns(), self.seq), dumps(make_row())))

        return once

    def take(self, queue: str) -> float:
        low, high = keys_of_queue(queue)
        raw, loads, handler = self.raw, self.loads, self.handler
        execute, first, after = raw.execute, raw.page_sql(True, 1), raw.page_sql(False, 1)
        delete = raw.delete_sql
        start = clock()
        rows = execute(first, (low, high)).fetchall()
        while rows:
            key, data = rows[0]
            item = loads(data)[0]
            if handler is not None:
                handler(item)
            execute(delete, (key,))
            rows = execute(after, (key, high)).fetchall()
        return clock() - start

    def drain(self, queue: str) -> float:
        """Pages of DRAIN_BATCH, each row decoded and deleted (SQLite); on a server,
        each row claimed FOR UPDATE SKIP LOCKED in the transaction that deletes it,
        as workers on many machines need."""
        if self.raw.vendor != "sqlite":
            return self.claiming_drain(queue)
        low, high = keys_of_queue(queue)
        raw, loads, handler = self.raw, self.loads, self.handler
        execute, delete = raw.execute, raw.delete_sql
        first, after = raw.page_sql(True, DRAIN_BATCH), raw.page_sql(False, DRAIN_BATCH)
        start = clock()
        rows = execute(first, (low, high)).fetchall()
        while rows:
            for key, data in rows:
                item = loads(data)[0]
                if handler is not None:
                    handler(item)
                execute(delete, (key,))
            more = len(rows) == DRAIN_BATCH
            rows = execute(after, (rows[-1][0], high)).fetchall() if more else []
        return clock() - start

    def claiming_drain(self, queue: str) -> float:
        low, high = keys_of_queue(queue)
        raw, loads, handler = self.raw, self.loads, self.handler
        key, p, execute, delete = raw.key, raw.p, raw.execute, raw.delete_sql
        claim = (
            f"SELECT {key}, value FROM {TABLE} WHERE {key} > {p} AND {key} < {p} "
            f"AND due_at IS NULL ORDER BY {key} LIMIT 1 FOR UPDATE SKIP LOCKED"
        )
        start = clock()
        after = low
        while True:
            execute("BEGIN")
            row = execute(claim, (after, high)).fetchone()
            if row is None:
                execute("COMMIT")
                break
            after, data = row
            item = loads(data)[0]
            if handler is not None:
                handler(item)
            execute(delete, (after,))
            execute("COMMIT")
        return clock() - start

    def read(self, queue: str, limit: int) -> Callable[[], object]:
        execute, loads = self.raw.execute, self.loads
        sql, bounds = self.raw.page_sql(True, limit), keys_of_queue(queue)
        return lambda: [loads(v) for _k, v in execute(sql, bounds).fetchall()]


def keys_of_queue(queue: str) -> tuple[bytes, bytes]:
    from deadletter.wire import keys

    return keys.queue_bounds(queue)


class AppSide:
    """The app's loops: the public API a user calls, `read` its read of the oldest
    ten (`fetch_failed_msgs`, or `iter_failed_msgs` in the apart shape)."""

    def __init__(self, read: Callable[[str, int], object]) -> None:
        from deadletter.drain.run import Drainer
        from deadletter.queue import dequeue, iter_failed_msgs, store_failed_msgs

        self.read_oldest = read
        self.drainer, self.dequeue, self.iterate = Drainer, dequeue, iter_failed_msgs
        self.store = store_failed_msgs

    def park(self, queue: str, python: bool) -> Callable[[int], float]:
        store = self.store
        return lambda r: timed(lambda: store(queue, app_message(FAILURE)), OPS, python)

    def take(self, prefix: str, python: bool) -> Callable[[int], float]:
        def run(r: int) -> float:
            iterate, dequeue = self.iterate, self.dequeue

            def once() -> None:
                for item in iterate(f"{prefix}-{r}", batch_size=1):
                    handle(item.msg)
                    dequeue(item.key)

            return timed(once, 1, python)

        return run

    def drain(self, prefix: str, python: bool) -> Callable[[int], float]:
        from django.test.utils import override_settings

        def run(r: int) -> float:
            queue = f"{prefix}-{r}"
            with (
                override_settings(DEADLETTER_HANDLERS={queue: "bench_limit.handle"}),
                codec_mode(python),
            ):
                start = clock()
                report = self.drainer([queue], log_progress=False).run()
                elapsed = clock() - start
            assert report.delivered == OPS, report.as_dict()
            return elapsed

        return run

    def read(self, queue: str, python: bool) -> Callable[[int], float]:
        read_oldest = self.read_oldest
        return lambda r: timed(lambda: read_oldest(queue, 10), OPS, python)


def codec_mode(python: bool) -> Any:
    from deadletter.wire import codec

    return codec.python_only() if python else contextlib.nullcontext()


def main() -> None:
    vendor, target, apart_target = django_on_fresh_databases("limit")
    logging.getLogger("deadletter").setLevel(logging.WARNING)  # each drain logs its run
    if vendor == "postgresql":
        commit_without_flush(target)  # as bench_core
        commit_without_flush(apart_target, APART)

    from deadletter.queue import store_failed_msgs

    require_speedups()
    if "--profile" in sys.argv:
        profile_park(store_failed_msgs)
        return
    raw = Raw(vendor, target, as_django=True)
    print(
        f"bench_limit on {describe(vendor, raw)}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; "
        f"{OPS:,} messages a round ({SCAN_ROWS:,} for scan), median of {ROUNDS} interleaved "
        f"rounds [lowest-highest round]{'; BENCH_QUICK' if QUICK else ''}"
        f"{'; CPU time of this thread' if clock is time.thread_time else ''}"
    )
    if clock is time.thread_time and vendor != "sqlite":
        sys.exit("BENCH_CLOCK=cpu measures SQLite only: a server's work is not this thread's")
    if vendor == "postgresql":
        print(
            "  raw psycopg as Django's connection has it (client-side binding, nothing "
            "prepared); the drain's anchor claims each row in its own transaction"
        )
    elif vendor == "mysql":
        print("  the drain's anchor claims each row in its own transaction")
    goal = {path: goals[VENDORS.index(vendor)] for path, goals in GOALS.items()}
    if "shared" in SHAPES:
        results = shared_shape(vendor, raw)
        print("  shared: the queue on the default alias; the raw side maps and stamps as the app")
        report(results, goal)
    if "apart" in SHAPES:
        from django.db import connections
        from django.test.utils import override_settings

        connections["default"].ensure_connection()  # the site's own connection, open beside
        with override_settings(DEADLETTER_DATABASE=APART):
            results = apart_shape(vendor, Raw(vendor, apart_target, as_django=True))
        print(
            f"  apart: the queue on its own alias {APART!r} (DEADLETTER_DATABASE), take and "
            "read-10 through iter_failed_msgs; the raw side only runs the SQL and cbor2"
        )
        report(results, goal)


def report(results: dict[str, dict[str, list[float]]], goal: dict[str, float | None]) -> None:
    ops = {"scan": SCAN_ROWS, "read-10": OPS}
    for path, times in results.items():
        print(ratio_line(path, times, ops.get(path, OPS), goal[path]))


def fill_round(raw: Raw, path: str, value: bytes) -> Callable[[int], None]:
    """Before each round: a queue of OPS rows for each side, settled."""

    def before(r: int) -> None:
        for side in ("a", "r", "p"):
            raw.fill(f"{path}-{side}-{r}", value, OPS)
        raw.settle()

    return before


def first_value(raw: Raw) -> bytes:
    """The encoded message the fills use, and a row in a queue sorting after every
    other: no side's inserts get SQLite's append-at-the-end shortcut that the last
    queue of the table would."""
    from deadletter.wire import codec, keys

    value = codec.encode_one(app_message(FAILURE).replace(queued_at=datetime.now(UTC)))
    raw.execute(raw.insert_sql, (keys.new_key("~after-all"), value))
    return value


def run_paths(
    raw: Raw, app: AppSide, anchor: Anchor, make_row: Callable[[], list[dict[str, Any]]]
) -> dict[str, dict[str, list[float]]]:
    """park, take, drain and read-10 of one shape, each side by side in rounds."""
    value = first_value(raw)
    rounds = Rounds(ROUNDS, raw.settle if raw.vendor == "sqlite" else lambda: None)
    results: dict[str, dict[str, list[float]]] = {}
    if "park" in CHOSEN:
        park = anchor.park("park-r", make_row)
        results["park"] = rounds.run(
            {
                "app": app.park("park-a", False),
                "raw": lambda r: timed(park, OPS),
                "py": app.park("park-p", True),
            }
        )
    if "take" in CHOSEN:
        results["take"] = rounds.run(
            {
                "app": app.take("take-a", False),
                "raw": lambda r: anchor.take(f"take-r-{r}"),
                "py": app.take("take-p", True),
            },
            fill_round(raw, "take", value),
        )
    if "drain" in CHOSEN:
        results["drain"] = rounds.run(
            {
                "app": app.drain("drain-a", False),
                "raw": lambda r: anchor.drain(f"drain-r-{r}"),
                "py": app.drain("drain-p", True),
            },
            fill_round(raw, "drain", value),
        )
    if "read-10" in CHOSEN:
        raw.fill("read", value, 10_000)
        raw.settle()
        assert len(list(app.read_oldest("read", 10))) == 10  # type: ignore[call-overload]
        read = anchor.read("read", 10)
        results["read-10"] = rounds.run(
            {
                "app": app.read("read", False),
                "raw": lambda r: timed(read, OPS),
                "py": app.read("read", True),
            }
        )
    return results


def shared_shape(vendor: str, raw: Raw) -> dict[str, dict[str, list[float]]]:
    """The queue on the default alias, the raw side mapping the user's failure to
    Go's map and stamping it as the app does; with dequeue and scan."""
    from deadletter.queue import dequeue, fetch_failed_msgs, iter_failed_msgs

    def stamped_row() -> list[dict[str, Any]]:
        return [raw_map(FAILURE, datetime.now(UTC).isoformat())]

    results = run_paths(raw, AppSide(fetch_failed_msgs), Anchor(raw, raw_handle), stamped_row)
    value = first_value(raw)
    rounds = Rounds(ROUNDS, raw.settle if vendor == "sqlite" else lambda: None)

    def app_dequeue(python: bool, side: str) -> Callable[[int], float]:
        def run(r: int) -> float:
            batch = iter(raw.keys_of(f"dequeue-{side}-{r}"))
            return timed(lambda: dequeue(next(batch)), OPS, python)

        return run

    def raw_dequeue(r: int) -> float:
        batch, execute, delete = iter(raw.keys_of(f"dequeue-r-{r}")), raw.execute, raw.delete_sql
        return timed(lambda: execute(delete, (next(batch),)), OPS)

    if "dequeue" in CHOSEN:
        results["dequeue"] = rounds.run(
            {"app": app_dequeue(False, "a"), "raw": raw_dequeue, "py": app_dequeue(True, "p")},
            fill_round(raw, "dequeue", value),
        )

    def app_scan(python: bool, side: str) -> Callable[[int], float]:
        return lambda r: timed(
            lambda: _consume(iter_failed_msgs(f"scan-{side}", batch_size=SCAN_PAGE)), 1, python
        )

    def raw_scan(r: int) -> float:
        low, high = keys_of_queue("scan-r")
        execute, loads = raw.execute, Anchor(raw, None).loads
        first, after = raw.page_sql(True, SCAN_PAGE), raw.page_sql(False, SCAN_PAGE)

        def once() -> None:
            rows = execute(first, (low, high)).fetchall()
            while rows:
                for _key, data in rows:
                    loads(data)
                more = len(rows) == SCAN_PAGE
                rows = execute(after, (rows[-1][0], high)).fetchall() if more else []

        return timed(once, 1)

    if "scan" in CHOSEN:
        for side in ("a", "r", "p"):
            raw.fill(f"scan-{side}", value, SCAN_ROWS)
        raw.settle()
        results["scan"] = rounds.run(
            {"app": app_scan(False, "a"), "raw": raw_scan, "py": app_scan(True, "p")}
        )
    return results


def apart_shape(vendor: str, raw: Raw) -> dict[str, dict[str, list[float]]]:
    """A site that keeps its dead letters apart: the queue on its own alias, read
    through `iter_failed_msgs`; the raw side dumps a map built once (no mapping, no
    stamping) and hands nothing to a handler."""
    from deadletter.queue import iter_failed_msgs

    row = [raw_map(FAILURE, datetime.now(UTC).isoformat())]

    def oldest(queue: str, limit: int) -> list[Any]:
        return list(iter_failed_msgs(queue, limit=limit))

    return run_paths(raw, AppSide(oldest), Anchor(raw, None), lambda: row)


def _consume(items: Any) -> None:
    for _ in items:
        pass


def describe(vendor: str, raw: Raw) -> str:
    if vendor == "postgresql":
        server = raw.execute("SHOW server_version").fetchone()[0]
        return f"PostgreSQL {server} (synchronous_commit=off on the bench database) vs psycopg"
    if vendor == "mysql":
        server = raw.execute("SELECT VERSION()").fetchone()[0]
        return f"MySQL/MariaDB {server} vs mysqlclient"
    import sqlite3

    return f"SQLite {sqlite3.sqlite_version} (WAL, synchronous=NORMAL) vs sqlite3"


def profile_park(store: Callable[..., bytes]) -> None:
    """cProfile of PROFILE_OPS parks, the 25 costliest functions by their own time."""
    for _ in range(200):
        store("profile-warm", app_message(FAILURE))
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(PROFILE_OPS):
        store("profile", app_message(FAILURE))
    profiler.disable()
    stats = pstats.Stats(profiler)
    stats.sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
