"""The admin's and the API's "retry these rows now": `redeliver`, with a drain's
outcome rules and exclusion rules."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable

from deadletter import queue
from deadletter.drain.handlers import load_handlers
from deadletter.drain.locking import QueueLock
from deadletter.drain.outcomes import deliver
from deadletter.drain.report import DrainReport, Outcome
from deadletter.drain.timeouts import HungHandlers, TimeLimit
from deadletter.wire import keys

__all__ = ["redeliver"]

logger = logging.getLogger("deadletter")


def redeliver(
    row_keys: Iterable[bytes],
    *,
    wait: bool = False,
    deadline: float | None = None,
    on_outcome: Callable[[bytes, Outcome], None] | None = None,
) -> DrainReport:
    """Hand the rows `row_keys` to their queues' handlers now, oldest first, with
    a drain's outcome rules: "retry these" for the admin and the API.

    It keeps to a drain's exclusion rules too: on SQLite it takes the queues'
    lock files (`DrainLocked` while a drain runs, unless `wait`); on
    PostgreSQL it claims each row, and a row another drain holds is left to
    it. A row that is gone, or held, is not counted. Raises `DrainConfigError`
    for a queue without a usable handler, before touching any row.

    With `deadline` (a `time.monotonic()` instant: a web request's budget) no
    row is handed over after it and a handler still running then is given up
    on, its row settled as a failed attempt; `report.unreached` counts the
    rows it did not get to, and `report.stopped_by` says why. `on_outcome` hears
    of each row handed over, with its outcome (the admin logs it).
    """
    selected = sorted({bytes(k) for k in row_keys})
    names = list(dict.fromkeys(keys.queue_of(k) for k in selected))
    handlers = load_handlers(names) if names else {}
    limit = TimeLimit.within(deadline=deadline)
    report = DrainReport(queues=names)
    claims = queue.can_claim_rows()
    db_file = None if claims else queue.sqlite_file()
    started = time.monotonic()
    lock: contextlib.AbstractContextManager[object] = (
        QueueLock(db_file, names, wait=wait) if db_file and names else contextlib.nullcontext()
    )

    def on_drop(dropped: queue.Dropped) -> None:
        report.add(Outcome(str(dropped.reason)))

    with lock:
        for index, key in enumerate(selected):
            seconds = limit.seconds()
            if seconds is not None and seconds <= 0:
                report.stopped_by, report.unreached = "time budget", len(selected) - index
                break
            loaded = handlers[keys.queue_of(key)]
            try:
                if claims:
                    with queue.atomic():
                        item = queue.fetch_msg(key, on_drop=on_drop)
                        if item is None:
                            continue
                        outcome = deliver(
                            item,
                            loaded.handler,
                            savepoint=True,
                            timeout=seconds,
                            policy=loaded.policy,
                        )
                else:
                    item = queue.fetch_msg(key, on_drop=on_drop)
                    if item is None:
                        continue
                    outcome = deliver(item, loaded.handler, timeout=seconds, policy=loaded.policy)
            except HungHandlers:
                report.stopped_by, report.unreached = "hung handlers", len(selected) - index
                break
            report.add(outcome)
            if on_outcome is not None:
                on_outcome(key, outcome)
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
