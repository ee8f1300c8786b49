"""Worker processes (PostgreSQL): `workers` forked processes claim rows side by
side, sharing the run's position in each queue and its `--limit` budget in
shared memory under an flock, and report to the parent over pipes.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import pickle
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from multiprocessing import connection as mp_connection
from typing import Any

from django.db import DatabaseError, connections

from deadletter import queue
from deadletter.drain.errors import DrainAborted
from deadletter.drain.outcomes import DrainReport, Outcome
from deadletter.drain.stopping import SignalGuard
from deadletter.wire import keys

__all__ = ["Budget", "Cursor", "Guard", "WorkerPool"]

logger = logging.getLogger("deadletter")

ABORT = signal.SIGUSR1
"""The parent's "abort now" to its workers, kept apart from its SIGTERM ("stop")."""


def _abort(signum: int, frame: Any) -> None:
    """A worker's `ABORT`: as a second SIGTERM, the message in hand stays queued."""
    raise DrainAborted(signal.SIGTERM)


class Guard:
    """Serialises the worker processes of one run on their shared counters.

    An `flock` on a scratch file rather than a multiprocessing lock: the
    kernel drops an flock when its holder dies, while a multiprocessing lock
    held by a SIGKILLed worker would block the others for good.
    """

    def __init__(self, path: str | None = None) -> None:
        self._path = path
        self._fd = -1
        self._pid = -1

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        if self._path is None:
            yield
            return
        import fcntl

        if self._pid != os.getpid():  # a worker opens its own: fork shares the lock otherwise
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
            self._pid = os.getpid()
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)


class Cursor:
    """The highest key this run has claimed in a queue.

    Each claim looks above it and moves it up, under the guard, so the next
    claim of any worker starts past every earlier one: no message, not even
    one that failed and stayed, is handed over twice in one run, and none is
    passed over (the rows skipped between are locked by drains elsewhere).
    """

    _SIZE = keys.MAX_QUEUE_NAME_BYTES + 32

    def __init__(self, guard: Guard, ctx: Any = None) -> None:
        self._guard = guard
        self._local: bytes | None = None
        self._buf = ctx.Array(ctypes.c_char, self._SIZE, lock=False) if ctx else None
        self._len = ctx.Value(ctypes.c_int, -1, lock=False) if ctx else None

    def _get(self) -> bytes | None:
        if self._buf is None or self._len is None:
            return self._local
        return None if self._len.value < 0 else bytes(self._buf.raw[: self._len.value])

    def _set(self, key: bytes) -> None:
        if self._buf is None or self._len is None:
            self._local = key
            return
        self._buf.raw = key.ljust(self._SIZE, b"\x00")
        self._len.value = len(key)

    def claim(self, take: Callable[[bytes | None], queue.Queued | None]) -> queue.Queued | None:
        with self._guard.held():
            item = take(self._get())
            if item is not None:
                self._set(item.key)
            return item


class Budget:
    """What is left of `--limit`: taken before a claim, given back if there was none."""

    def __init__(self, limit: int | None, guard: Guard, ctx: Any = None) -> None:
        self._limit = limit
        self._guard = guard
        self._local = 0
        self._used = ctx.Value(ctypes.c_longlong, 0, lock=False) if ctx else None

    def _add(self, delta: int) -> bool:
        with self._guard.held():
            used = self._local if self._used is None else self._used.value
            if delta > 0 and self._limit is not None and used >= self._limit:
                return False
            if self._used is None:
                self._local = used + delta
            else:
                self._used.value = used + delta
            return True

    def take(self) -> bool:
        return self._limit is None or self._add(1)

    def give_back(self) -> None:
        if self._limit is not None:
            self._add(-1)


class WorkerPool:
    """The worker-process half of `Drainer` (a mixin): forking, reporting, the
    worker's own loop. It relies on the run loop's state and `_drain_claiming`."""

    queues: list[str]
    handlers: dict[str, tuple[str, Any]]
    workers: int
    limit: int | None
    grace: float | None
    stopped_by: str | None
    on_outcome: Callable[[Outcome], None] | None
    _stop: threading.Event
    _until: dict[str, bytes | None]
    _cursors: dict[str, Cursor]
    _guard: Guard
    _budget: Budget
    _events: Any
    _parent_pid: int | None
    _next_at: float

    def stop(self, reason: str = "stop") -> None:
        raise NotImplementedError

    def _snapshot(self, report: DrainReport) -> bool:
        raise NotImplementedError

    def _may_go_on(self) -> bool:
        raise NotImplementedError

    def _drain_claiming(self, name: str, handler: Any, until: bytes, report: DrainReport) -> None:
        raise NotImplementedError

    # -- worker processes (PostgreSQL)

    def _run_workers(self, report: DrainReport) -> None:
        """Fork `workers` processes that claim rows side by side; each reports
        over its own pipe (no lock shared with a worker that may be killed)."""
        ctx = multiprocessing.get_context("fork")
        fd, guard_path = tempfile.mkstemp(prefix="deadletter-drain-", suffix=".lock")
        os.close(fd)
        try:
            self._guard = Guard(guard_path)
            if not self._snapshot(report):
                return
            self._cursors = {name: Cursor(self._guard, ctx) for name in self.queues}
            self._budget = Budget(self.limit, self._guard, ctx)
            connections.close_all()  # a forked worker must not share the parent's socket
            parent = os.getpid()
            procs: list[Any] = []
            readers: dict[Any, Any] = {}
            for index in range(self.workers):
                reader, writer = ctx.Pipe(duplex=False)
                proc = ctx.Process(
                    target=self._worker_main,
                    args=(index, writer, parent),
                    name=f"deadletter-drain-{index}",
                )
                proc.start()
                writer.close()  # EOF on the reader once the worker is gone
                procs.append(proc)
                readers[reader] = proc
            logger.info("drain workers started pids=%s", ",".join(str(p.pid) for p in procs))
            told = False
            try:
                while readers:
                    if self._stop.is_set() and not told:
                        told = self._signal_workers(procs)
                    for conn in mp_connection.wait(list(readers), timeout=0.2):
                        self._read(conn, readers, report)
            except DrainAborted:
                if not told:
                    self._signal_workers(procs)
                self._signal_workers(procs, ABORT)
                deadline = time.monotonic() + 30
                while readers and time.monotonic() < deadline:
                    for conn in mp_connection.wait(list(readers), timeout=0.2):
                        self._read(conn, readers, report)
                raise
            finally:
                for proc in procs:
                    proc.join(timeout=10)
                    if proc.exitcode != 0:
                        logger.error(
                            "drain worker died pid=%s exitcode=%s", proc.pid, proc.exitcode
                        )
                        report.errors += 1
        finally:
            os.unlink(guard_path)

    def _signal_workers(self, procs: Sequence[Any], signum: int = signal.SIGTERM) -> bool:
        """SIGTERM asks each worker to stop after the message in hand; `ABORT`
        aborts it at once. Two signals of one kind sent close together can reach
        a worker as one (one pending slot a signal), so the abort has its own."""
        for proc in procs:
            if proc.is_alive() and proc.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signum)
        return True

    def _read(self, conn: Any, readers: dict[Any, Any], report: DrainReport) -> None:
        try:
            kind, payload = conn.recv()
        except (EOFError, OSError, pickle.UnpicklingError):  # a worker ended, maybe mid-message
            del readers[conn]
            conn.close()
            return
        if kind == "outcome":
            if self.on_outcome is not None:
                self.on_outcome(Outcome(payload))
        elif kind == "report":
            report.merge(payload)

    def _send(self, message: tuple[str, Any]) -> None:
        """Report to the parent with SIGTERM held back, so an abort never cuts a
        message in half; a parent that is gone is noticed by `_may_go_on`."""
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, ABORT})
        try:
            self._events.send(message)
        except (OSError, ValueError):
            pass
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def _worker_main(self, index: int, events: Any, parent_pid: int) -> None:
        """A worker process: SIGINT is left to the parent (which passes a stop on
        as SIGTERM), so one Ctrl-C on a terminal is not counted twice; a stop
        waits `grace` for the message in hand, as the parent does."""
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(ABORT, _abort)
        self._stop = threading.Event()
        self.stopped_by = None
        self._events = events
        self._parent_pid = parent_pid
        self._next_at = 0.0
        report = DrainReport(queues=list(self.queues), workers=1)
        try:
            with SignalGuard(self, (signal.SIGTERM,), grace=self.grace):
                try:
                    self._run_bounded(report)
                except DrainAborted as exc:
                    report.aborted_by = exc.signame
        except Exception:
            logger.exception("drain worker failed index=%s", index)
            report.errors += 1
        finally:
            report.stopped_by = self.stopped_by
            self._send(("report", report.as_dict()))
            events.close()
            connections.close_all()

    def _run_bounded(self, report: DrainReport) -> None:
        """`_run_here` with the parent's snapshot of each queue's tail."""
        for name in self.queues:
            if not self._may_go_on():
                return
            until = self._until.get(name)
            if until is None:
                continue
            try:
                self._drain_claiming(name, self.handlers[name][1], until, report)
            except DatabaseError:
                logger.exception("drain of a queue failed queue=%s", name)
                report.errors += 1
