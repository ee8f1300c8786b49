"""Carrying on unfinished redrives: `resume_redrives` (the command's `--resume`)
and the drain service's `redrive_turn`, each running planned ones and taking over
those whose runner is gone (`redrive_run.is_stale`), oldest first.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from deadletter.conf import conf
from deadletter.drain.delivery import Stop
from deadletter.drain.redrive_run import OnProgress, is_stale, run_redrive
from deadletter.drain.redrives import RedriveError
from deadletter.models import Redrive

__all__ = ["redrive_turn", "resume_redrives"]

logger = logging.getLogger("deadletter")


def resume_redrives(
    redrive_id: int | None = None,
    *,
    on_progress: OnProgress | None = None,
    stop: Stop | None = None,
    queues: Sequence[str] | None = None,
) -> list[Redrive]:
    """Carry on unfinished redrives one after another: `redrive_id` alone (planned,
    stopped, failed, or running with a gone runner), or, without it, every planned
    one and every running one whose runner is gone, oldest first (of `queues`
    only, when given). Returns the rows as their runs left them."""
    stop = stop or Stop()
    if redrive_id is not None:
        return [run_redrive(redrive_id, on_progress=on_progress, stop=stop, resume=True)]
    done = []
    for candidate in _unfinished(queues):
        if stop.is_set():
            break
        try:
            done.append(run_redrive(candidate, on_progress=on_progress, stop=stop))
        except RedriveError as exc:
            logger.info("redrive left to another runner id=%s: %s", candidate, exc)
    return done


def _unfinished(queues: Sequence[str] | None) -> list[int]:
    """Planned redrives and running ones with a gone runner, oldest first."""
    rows = Redrive.objects.using(conf.DATABASE).filter(
        status__in=[Redrive.Status.PLANNED, Redrive.Status.RUNNING]
    )
    found = []
    for redrive in rows.order_by("id"):
        if queues is not None and redrive.queue not in queues and not redrive.destination:
            continue  # no handler here; a move needs none
        if redrive.status == Redrive.Status.PLANNED or is_stale(redrive):
            found.append(redrive.pk)
    return found


def redrive_turn(*, queues: Sequence[str], seconds: float, halted: Callable[[], bool]) -> int:
    """The drain service's turn for redrives: run planned (and abandoned) ones of
    `queues` for up to `seconds`, then hand the one in progress back as planned,
    to carry on at the next turn. Returns how many it ran."""
    deadline = time.monotonic() + seconds
    ran = 0
    for candidate in _unfinished(queues):
        if halted() or time.monotonic() >= deadline:
            break
        try:
            run_redrive(candidate, deadline=deadline, halted=halted)
        except RedriveError as exc:
            logger.info("redrive left to another runner id=%s: %s", candidate, exc)
            continue
        ran += 1
    return ran
