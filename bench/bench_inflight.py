"""Issue 35: what the handler journal (`drain/inflight.py`) costs a message: a slot
written before the handler and cleared after it (two stores into a shared memory map, no
system call, no fsync), against
the same loop without a journal. Runs on a fresh SQLite file (its journal lives in
the database's spool folder); the figure is microseconds a message, the median of
BENCH_ROUNDS (5) rounds of BENCH_MESSAGES (100,000) messages each, no goal.
"""

from __future__ import annotations

import os
import statistics
import time

from _setup import django_on_fresh_sqlite

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
MESSAGES = int(os.environ.get("BENCH_MESSAGES", "100000"))


def main() -> None:
    django_on_fresh_sqlite("bench_inflight")
    from deadletter.drain import inflight
    from deadletter.wire import keys

    journal = inflight.journal()
    assert journal is not None, "no journal on this database"
    key = keys.new_key("webhooks")
    actor = b"service"
    bare, journaled = [], []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for _ in range(MESSAGES):
            pass
        bare.append(time.perf_counter() - started)
        started = time.perf_counter()
        for _ in range(MESSAGES):
            journal.leave(journal.enter(key, actor))
        journaled.append(time.perf_counter() - started)
    cost = (statistics.median(journaled) - statistics.median(bare)) / MESSAGES * 1e6
    spread = [(j - b) / MESSAGES * 1e6 for j, b in zip(journaled, bare, strict=True)]
    print(
        f"bench_inflight: the handler journal costs {cost:.2f} us a message "
        f"[{min(spread):.2f}-{max(spread):.2f}], median of {ROUNDS} rounds of {MESSAGES:,} "
        f"(enter + leave: two stores of a {inflight.SLOT}-byte slot, no fsync) in {journal.folder}"
    )


if __name__ == "__main__":
    main()
