"""An operator's "retry these rows now", for every edge: `redeliver`, the delivery
loop (`delivery.Delivery`) fed by a list of keys instead of a queue's walk; the
queue access it needs on each row's queue (`ACTION`), and who its failed attempts
are recorded as (`retry_actor`)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from django.db import DatabaseError

from deadletter import queue
from deadletter.drain.delivery import SKIPPED, Delivery, Skip, Stop
from deadletter.drain.handlers import load_handlers
from deadletter.drain.locking import QueueLock
from deadletter.drain.outcomes import RETRY_ACTOR
from deadletter.drain.report import DrainReport, Outcome
from deadletter.drain.timeouts import TimeLimit
from deadletter.queue import claims
from deadletter.store import reconnect, sql
from deadletter.wire import keys

__all__ = ["ACTION", "redeliver", "retry_actor"]

logger = logging.getLogger("deadletter")

ACTION = "retry"
"""The queue access action a retry needs on the queue of each row it hands over."""


def retry_actor(user: Any) -> str:
    """Who `user`'s retry records its failed attempts as: `retry:<user name>`."""
    return f"{RETRY_ACTOR}{user.get_username()}"


class _Chosen:
    """The chosen rows, oldest first, one a turn: a row that is gone (or, on a
    server, that another drain holds) is `SKIPPED`."""

    def __init__(self, row_keys: list[bytes], delivery: Delivery) -> None:
        self._keys = row_keys
        self._next = 0
        self._delivery = delivery

    def __call__(self) -> queue.Queued | Skip | None:
        if self._next >= len(self._keys):
            return None
        key = self._keys[self._next]
        self._next += 1
        item = claims.fetch_msg(key, on_drop=self._delivery.dropped)
        return SKIPPED if item is None else item

    def left(self) -> int:
        """The rows not taken yet."""
        return len(self._keys) - self._next


def redeliver(
    row_keys: Iterable[bytes],
    *,
    wait: bool = False,
    deadline: float | None = None,
    on_outcome: Callable[[bytes, Outcome], None] | None = None,
    actor: str = "retry",
) -> DrainReport:
    """Hand the rows `row_keys` to their queues' handlers now, oldest first, with
    a drain's outcome rules: "retry these" for the admin and the API.

    It keeps to a drain's exclusion rules too: on SQLite it takes the queues'
    lock files (`DrainLocked` while a drain runs, unless `wait`); on
    PostgreSQL and MySQL/MariaDB it claims each row, and a row another drain
    holds is left to it. A row that is gone, or held, is not counted. Raises
    `DrainConfigError` for a queue without a usable handler, before touching
    any row. An operator chose the rows, so no breaker stops them.

    With `deadline` (a `time.monotonic()` instant: a web request's budget) no
    row is handed over after it and a handler still running then is given up
    on, its row settled as a failed attempt; `report.unreached` counts the
    rows it did not get to, and `report.stopped_by` says why. `on_outcome`
    hears of each row handed over, with its outcome (the admin logs it).
    `actor` is who failed attempts are recorded as: `retry:<user name>`.
    """
    selected = sorted({bytes(k) for k in row_keys})
    names = list(dict.fromkeys(keys.queue_of(k) for k in selected))
    handlers = load_handlers(names) if names else {}
    report = DrainReport(queues=names)
    delivery = Delivery(
        handlers=handlers,
        report=report,
        stop=Stop(),
        limit=TimeLimit.within(deadline=deadline),
        on_outcome=on_outcome,
        breakers=False,
        autocommit_between=True,
        actor=actor,
    )
    db_file = None if delivery.claims else claims.sqlite_file()
    started = time.monotonic()
    lock: contextlib.AbstractContextManager[object] = (
        QueueLock(db_file, names, wait=wait) if db_file and names else contextlib.nullcontext()
    )
    chosen = _Chosen(selected, delivery)
    with lock:
        try:
            untaken = delivery.hand_over(chosen)
        except DatabaseError:
            logger.exception("redeliver failed rows=%s", len(selected))
            report.errors += 1
            reconnect.close_if_lost(sql.connection())
            delivery.stop("database error")
            untaken = None
    report.unreached = chosen.left() + (untaken is not None)
    report.stopped_by = delivery.stop.reason if report.unreached else None
    report.elapsed = time.monotonic() - started
    logger.info(
        "redelivered rows=%s delivered=%s requeued=%s failed=%s dropped=%s unreached=%s",
        len(selected),
        report.delivered,
        report.requeued,
        report.failed,
        sum(report.dropped.values()),
        report.unreached,
    )
    return report
