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

`--profile` prints a cProfile of PROFILE_OPS parks instead (the closing note's
before/after). BENCH_ROUNDS, BENCH_OPS override the rounds (15) and ops (2,000);
BENCH_PATHS=park,read-10 runs only those paths; BENCH_QUICK=1 is a smoke run.
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

from _setup import commit_without_flush, django_on_fresh_database, require_speedups
from bench_core import Raw

QUICK = os.environ.get("BENCH_QUICK") == "1"
ROUNDS = int(os.environ.get("BENCH_ROUNDS") or (3 if QUICK else 15))
OPS = int(os.environ.get("BENCH_OPS") or (300 if QUICK else 2000))
SCAN_ROWS = 2000 if QUICK else 20_000
PROFILE_OPS = 3000
PATHS = ("park", "take", "drain", "read-10", "dequeue", "scan")
CHOSEN = tuple(filter(None, (os.environ.get("BENCH_PATHS") or ",".join(PATHS)).split(",")))
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


def main() -> None:
    vendor, target = django_on_fresh_database("limit")
    logging.getLogger("deadletter").setLevel(logging.WARNING)  # each drain logs its run
    import cbor2
    from django.test.utils import override_settings

    if vendor == "postgresql":
        commit_without_flush(target)  # as bench_core

    from deadletter.drain.run import Drainer
    from deadletter.queue import dequeue, fetch_failed_msgs, iter_failed_msgs, store_failed_msgs
    from deadletter.wire import codec, keys

    require_speedups()
    if "--profile" in sys.argv:
        profile_park(store_failed_msgs)
        return

    raw = Raw(vendor, target, as_django=True)
    execute, dumps, loads = raw.execute, cbor2.dumps, cbor2.loads
    pack = struct.Struct(">QQ").pack
    seq = [1 << 40]
    value = codec.encode_one(app_message(FAILURE).replace(queued_at=datetime.now(UTC)))
    goal = {path: goals[VENDORS.index(vendor)] for path, goals in GOALS.items()}
    rounds = Rounds(ROUNDS, raw.settle if vendor == "sqlite" else lambda: None)
    # A row in a queue sorting after every other: no side's inserts get SQLite's
    # append-at-the-end shortcut that the last queue of the table would.
    execute(raw.insert_sql, (keys.new_key("~after-all"), value))

    def timed(fn: Callable[[], object], count: int, python: bool = False) -> float:
        with codec.python_only() if python else contextlib.nullcontext():
            start = time.perf_counter()
            for _ in range(count):
                fn()
            return time.perf_counter() - start

    def fill(queue: str, count: int) -> None:
        raw.fill(queue, value, count)

    def settle() -> None:
        raw.settle() if vendor != "postgresql" else execute(f"ANALYZE {raw_table()}")

    def raw_table() -> str:
        return "deadletter_queuedmessage"

    results: dict[str, dict[str, list[float]]] = {}

    # --- park ------------------------------------------------------------------
    def app_park(queue: str, python: bool) -> Callable[[int], float]:
        return lambda r: timed(lambda: store_failed_msgs(queue, app_message(FAILURE)), OPS, python)

    def raw_park(queue: str) -> Callable[[int], float]:
        prefix = queue.encode() + b"\x00"
        sql = raw.insert_sql

        def once() -> None:
            now = time.time_ns()
            seq[0] += 1 << 16
            stamp = datetime.fromtimestamp(now / 1e9, UTC).isoformat()
            execute(sql, (prefix + pack(now, seq[0]), dumps([raw_map(FAILURE, stamp)])))

        return lambda r: timed(once, OPS)

    if "park" in CHOSEN:
        results["park"] = rounds.run(
            {
                "app": app_park("park-a", False),
                "raw": raw_park("park-r"),
                "py": app_park("park-p", True),
            }
        )

    # --- take + handle + remove, one message at a time ---------------------------
    def app_take(python: bool, side: str) -> Callable[[int], float]:
        def run(r: int) -> float:
            queue = f"take-{side}-{r}"
            with codec.python_only() if python else contextlib.nullcontext():
                start = time.perf_counter()
                for item in iter_failed_msgs(queue, batch_size=1):
                    handle(item.msg)
                    dequeue(item.key)
                return time.perf_counter() - start

        return run

    def raw_take(r: int) -> float:
        low, high = keys.queue_bounds(f"take-r-{r}")
        first, after = raw.page_sql(True, 1), raw.page_sql(False, 1)
        delete = raw.delete_sql
        start = time.perf_counter()
        rows = execute(first, (low, high)).fetchall()
        while rows:
            key, data = rows[0]
            raw_handle(loads(data)[0])
            execute(delete, (key,))
            rows = execute(after, (key, high)).fetchall()
        return time.perf_counter() - start

    def fill_round(path: str) -> Callable[[int], None]:
        def before(r: int) -> None:
            for side in ("a", "r", "p"):
                fill(f"{path}-{side}-{r}", OPS)
            settle()

        return before

    if "take" in CHOSEN:
        results["take"] = rounds.run(
            {"app": app_take(False, "a"), "raw": raw_take, "py": app_take(True, "p")},
            fill_round("take"),
        )

    # --- the drain command's loop --------------------------------------------------
    def app_drain(python: bool, side: str) -> Callable[[int], float]:
        def run(r: int) -> float:
            queue = f"drain-{side}-{r}"
            with (
                override_settings(DEADLETTER_HANDLERS={queue: "bench_limit.handle"}),
                codec.python_only() if python else contextlib.nullcontext(),
            ):
                start = time.perf_counter()
                report = Drainer([queue], log_progress=False).run()
                elapsed = time.perf_counter() - start
            assert report.delivered == OPS, report.as_dict()
            return elapsed

        return run

    def raw_drain(r: int) -> float:
        low, high = keys.queue_bounds(f"drain-r-{r}")
        first, after = raw.page_sql(True, DRAIN_BATCH), raw.page_sql(False, DRAIN_BATCH)
        delete = raw.delete_sql
        start = time.perf_counter()
        rows = execute(first, (low, high)).fetchall()
        while rows:
            for key, data in rows:
                raw_handle(loads(data)[0])
                execute(delete, (key,))
            more = len(rows) == DRAIN_BATCH
            rows = execute(after, (rows[-1][0], high)).fetchall() if more else []
        return time.perf_counter() - start

    def raw_claiming_drain(r: int) -> float:
        """A server's drain: each row claimed FOR UPDATE SKIP LOCKED in the
        transaction that deletes it, as workers on many machines need."""
        low, high = keys.queue_bounds(f"drain-r-{r}")
        key, p = raw.key, raw.p
        claim = (
            f"SELECT {key}, value FROM {raw_table()} WHERE {key} > {p} AND {key} < {p} "
            f"AND due_at IS NULL ORDER BY {key} LIMIT 1 FOR UPDATE SKIP LOCKED"
        )
        delete, begin = raw.delete_sql, "BEGIN"
        start = time.perf_counter()
        after = low
        while True:
            execute(begin)
            row = execute(claim, (after, high)).fetchone()
            if row is None:
                execute("COMMIT")
                break
            after, data = row
            raw_handle(loads(data)[0])
            execute(delete, (after,))
            execute("COMMIT")
        return time.perf_counter() - start

    if "drain" in CHOSEN:
        anchor = raw_drain if vendor == "sqlite" else raw_claiming_drain
        results["drain"] = rounds.run(
            {"app": app_drain(False, "a"), "raw": anchor, "py": app_drain(True, "p")},
            fill_round("drain"),
        )

    # --- read the oldest 10, decoded; dequeue alone; a scan --------------------------
    fill("read", 10_000)
    for side in ("a", "r", "p"):
        fill(f"scan-{side}", SCAN_ROWS)
    settle()

    def app_read(python: bool) -> Callable[[int], float]:
        return lambda r: timed(lambda: fetch_failed_msgs("read", limit=10), OPS, python)

    def raw_read(r: int) -> float:
        sql, bounds = raw.page_sql(True, 10), keys.queue_bounds("read")
        return timed(lambda: [loads(v) for _k, v in execute(sql, bounds).fetchall()], OPS)

    assert len(fetch_failed_msgs("read", limit=10)) == 10
    if "read-10" in CHOSEN:
        results["read-10"] = rounds.run(
            {"app": app_read(False), "raw": raw_read, "py": app_read(True)}
        )

    def keys_of(queue: str) -> list[bytes]:
        return raw.keys_of(queue)

    def app_dequeue(python: bool, side: str) -> Callable[[int], float]:
        def run(r: int) -> float:
            batch = iter(keys_of(f"dequeue-{side}-{r}"))
            return timed(lambda: dequeue(next(batch)), OPS, python)

        return run

    def raw_dequeue(r: int) -> float:
        batch = iter(keys_of(f"dequeue-r-{r}"))
        delete = raw.delete_sql
        return timed(lambda: execute(delete, (next(batch),)), OPS)

    if "dequeue" in CHOSEN:
        results["dequeue"] = rounds.run(
            {"app": app_dequeue(False, "a"), "raw": raw_dequeue, "py": app_dequeue(True, "p")},
            fill_round("dequeue"),
        )

    def app_scan(python: bool, side: str) -> Callable[[int], float]:
        def run(r: int) -> float:
            return timed(
                lambda: _consume(iter_failed_msgs(f"scan-{side}", batch_size=SCAN_PAGE)), 1, python
            )

        return run

    def raw_scan(r: int) -> float:
        low, high = keys.queue_bounds("scan-r")
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
        results["scan"] = rounds.run(
            {"app": app_scan(False, "a"), "raw": raw_scan, "py": app_scan(True, "p")}
        )

    # --- report ----------------------------------------------------------------------
    print(
        f"bench_limit on {describe(vendor, raw)}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; "
        f"{OPS:,} messages a round ({SCAN_ROWS:,} for scan), median of {ROUNDS} interleaved "
        f"rounds [lowest-highest round]{'; BENCH_QUICK' if QUICK else ''}"
    )
    print(f"  message: {len(value)} bytes encoded; throughput ratio = raw time / app time")
    if vendor == "postgresql":
        print(
            "  raw psycopg as Django's connection has it (client-side binding, nothing "
            "prepared); the drain's anchor claims each row in its own transaction"
        )
    elif vendor == "mysql":
        print("  the drain's anchor claims each row in its own transaction")
    ops = {"scan": SCAN_ROWS, "read-10": OPS}
    for path, times in results.items():
        print(ratio_line(path, times, ops.get(path, OPS), goal[path]))


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
