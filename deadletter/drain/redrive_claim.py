"""Who runs a redrive: this process claims the row (`claim_redrive`), a watcher
thread keeps the claim (`Watcher`), and a runner that is gone is seen as such
(`is_stale`), so its redrive can be taken over.

A run claims its row (planned -> running, `runner` "host:pid", a heartbeat) by one
conditional UPDATE, so two processes never run one redrive. The watcher re-reads
the row every second (a cancel stops the run after the message in hand; a runner
that is no longer this process stops too) and writes the heartbeat. A running
redrive whose heartbeat is older than `STALE_AFTER`, or whose runner was a process
of this host that is gone, is stale.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

from django.db import DatabaseError, connections

from deadletter.conf import conf
from deadletter.drain.delivery import Stop
from deadletter.drain.redrives import RedriveError
from deadletter.models import Redrive
from deadletter.store import reconnect

__all__ = [
    "CHECK_EVERY",
    "HEARTBEAT_EVERY",
    "STALE_AFTER",
    "Watched",
    "Watcher",
    "claim_redrive",
    "is_stale",
    "runner_name",
]

logger = logging.getLogger("deadletter")

STALE_AFTER = 30.0
"""Seconds without a heartbeat after which a running redrive's runner counts as gone."""
HEARTBEAT_EVERY = 5.0
CHECK_EVERY = 1.0
"""How often a run re-reads its row for a cancel."""


def runner_name() -> str:
    """This process as a redrive's `runner`: `host:pid`."""
    return f"{socket.gethostname()}:{os.getpid()}"


def is_stale(redrive: Redrive, now: datetime | None = None) -> bool:
    """Whether a running redrive's runner is gone: a process of this host that no
    longer exists, or no heartbeat for `STALE_AFTER` seconds."""
    if redrive.status != Redrive.Status.RUNNING:
        return False
    host, _, pid = redrive.runner.rpartition(":")
    here = host == socket.gethostname() and pid.isdigit() and int(pid) != os.getpid()
    if here and not _alive(int(pid)):
        return True
    now = now or datetime.now(UTC)
    beat = redrive.heartbeat_at
    return beat is None or now - beat > timedelta(seconds=STALE_AFTER)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def claim_redrive(redrive_id: int, *, resume: bool) -> Redrive:
    """Make this process the redrive's runner by one conditional UPDATE on the row as
    read, so of two processes claiming it at once one wins."""
    rows = Redrive.objects.using(conf.DATABASE)
    redrive = rows.filter(pk=redrive_id).first()
    if redrive is None:
        raise RedriveError(f"no redrive {redrive_id}")
    status = redrive.status
    allowed = status == Redrive.Status.PLANNED or is_stale(redrive)
    if resume and status in (Redrive.Status.STOPPED, Redrive.Status.FAILED):
        allowed = True
    if not allowed:
        if status == Redrive.Status.RUNNING:
            raise RedriveError(f"{redrive} is being run by {redrive.runner}")
        raise RedriveError(f"{redrive} cannot be run: it is {status}")
    now = datetime.now(UTC)
    claimed = rows.filter(
        pk=redrive_id, status=status, runner=redrive.runner, heartbeat_at=redrive.heartbeat_at
    ).update(
        status=Redrive.Status.RUNNING,
        runner=runner_name(),
        heartbeat_at=now,
        started_at=redrive.started_at or now,
        finished_at=None,
        reason="",
    )
    if not claimed:
        raise RedriveError(f"{redrive} was taken by another runner")
    redrive.refresh_from_db(using=conf.DATABASE)
    logger.info(
        "redrive running id=%s queue=%s destination=%s cursor=%s matched=%s",
        redrive.pk,
        redrive.queue,
        redrive.destination or "-",
        redrive.cursor.hex() if redrive.cursor else "-",
        redrive.matched,
    )
    return redrive


class Watched(Protocol):
    """What the watcher reads and tells of a run: its row, its runner name, its stop."""

    redrive: Redrive
    me: str
    lost: bool
    stop: Stop

    def stopping(self) -> bool: ...


class Watcher(threading.Thread):
    """Re-reads the run's row every `CHECK_EVERY` seconds on a connection of its own:
    a cancel, or another runner, stops the run after the message in hand; writes
    the heartbeat every `HEARTBEAT_EVERY` seconds meanwhile (a slow handler)."""

    def __init__(self, run: Watched) -> None:
        super().__init__(name=f"deadletter-redrive-{run.redrive.pk}", daemon=True)
        self.job = run
        self._done = threading.Event()

    def run(self) -> None:
        try:
            self._watch()
        finally:
            connections[conf.DATABASE].close()

    def _watch(self) -> None:
        run = self.job
        rows = Redrive.objects.using(conf.DATABASE)
        beat_at = time.monotonic() + HEARTBEAT_EVERY
        while not self._done.wait(CHECK_EVERY):
            try:
                row = rows.filter(pk=run.redrive.pk).values_list("status", "runner").first()
                if row is None or row[0] == Redrive.Status.CANCELLED:
                    run.stop("cancelled")
                elif row[1] != run.me:
                    run.lost = True
                    run.stop("taken over")
                elif time.monotonic() >= beat_at:
                    beat_at = time.monotonic() + HEARTBEAT_EVERY
                    rows.filter(pk=run.redrive.pk, runner=run.me).update(
                        heartbeat_at=datetime.now(UTC)
                    )
                run.stopping()
            except DatabaseError:
                logger.warning("redrive watcher cannot read its row id=%s", run.redrive.pk)
                reconnect.close_if_lost(connections[conf.DATABASE])

    def finish(self) -> None:
        self._done.set()
        self.join()
