"""Worker processes (PostgreSQL): `workers` forked processes claim rows side by
side, sharing the run's position in each queue and its `--limit` budget in
shared memory under an flock, and report to the parent over pipes.

`run.Drainer` makes a `WorkerPool` for a run with workers and hands it the
run's stop (an event), where settled messages go and the work a worker does: the pool
forks and watches, and each worker runs the drainer's claiming loop through
its `Worker` (shared position, budget, pipe). Plain callables rather than the
drainer itself, so `workers` stays below `run`.
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
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, cast

from django.db import connections

from deadletter import queue
from deadletter.drain.errors import DrainAborted
from deadletter.drain.report import DrainReport, Outcome
from deadletter.wire import keys

__all__ = ["ABORT", "Budget", "Cursor", "Guard", "Worker", "WorkerPool"]

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


class Worker:
    """One worker process's end of the pool: the run's shared position and
    budget it claims through, and the pipe it reports on to its parent.

    Made in the parent before the fork; only the child uses it.
    """

    def __init__(
        self,
        index: int,
        events: Connection[Any, Any],
        parent_pid: int,
        cursors: dict[str, Cursor],
        budget: Budget,
    ) -> None:
        self.index = index
        self.cursors = cursors
        self.budget = budget
        self._events = events
        self._parent_pid = parent_pid

    def orphaned(self) -> bool:
        """The parent is gone (the worker was re-parented): nobody reads its reports."""
        return os.getppid() != self._parent_pid

    def report_outcome(self, outcome: Outcome) -> None:
        """One settled message, for the parent's `on_outcome` (a progress bar)."""
        self._send(("outcome", outcome.value))

    def finish(self, report: DrainReport) -> None:
        """The worker's report, last on its pipe; the pipe's EOF tells the parent it is done."""
        self._send(("report", report.as_dict()))
        self._events.close()

    def _send(self, message: tuple[str, Any]) -> None:
        """Report to the parent with SIGTERM held back, so an abort never cuts a
        message in half; a parent that is gone is noticed by `orphaned`."""
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, ABORT})
        try:
            self._events.send(message)
        except (OSError, ValueError):
            pass
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)


class WorkerPool:
    """The forked worker processes of one drain run (PostgreSQL): it forks them,
    passes the drain's stop on to them, merges their reports into the run's.

    The pool owns what the workers share (the flock guard, a cursor a queue,
    the `--limit` budget, all in shared memory), the pipes and the processes;
    `work` does the claiming, in each worker, and fills the worker's report;
    `stop` is the run's, passed on to the workers; `on_outcome` hears, in the
    parent, of each message a worker settled.
    """

    def __init__(
        self,
        *,
        queues: Sequence[str],
        workers: int,
        limit: int | None,
        stop: threading.Event,
        on_outcome: Callable[[Outcome], None],
        work: Callable[[Worker, DrainReport], None],
    ) -> None:
        self._stop = stop
        self._on_outcome = on_outcome
        self._work = work
        self._queues = list(queues)
        self._count = workers
        self._limit = limit
        self._ctx = multiprocessing.get_context("fork")
        self._procs: list[BaseProcess] = []
        self._readers: dict[Connection[Any, Any], BaseProcess] = {}

    # -- the parent

    def run(self, report: DrainReport) -> None:
        """Fork the workers, which claim rows side by side below the tails the
        drain noted; each reports over its own pipe (no lock shared with a
        worker that may be killed). Returns when every worker has ended."""
        fd, guard_path = tempfile.mkstemp(prefix="deadletter-drain-", suffix=".lock")
        os.close(fd)
        try:
            guard = Guard(guard_path)
            cursors = {name: Cursor(guard, self._ctx) for name in self._queues}
            budget = Budget(self._limit, guard, self._ctx)
            connections.close_all()  # a forked worker must not share the parent's socket
            self._start(cursors, budget)
            self._watch(report)
        finally:
            os.unlink(guard_path)

    def _start(self, cursors: dict[str, Cursor], budget: Budget) -> None:
        parent = os.getpid()
        for index in range(self._count):
            reader, writer = self._ctx.Pipe(duplex=False)
            worker = Worker(index, writer, parent, cursors, budget)
            proc = self._ctx.Process(
                target=self._worker_main, args=(worker,), name=f"deadletter-drain-{index}"
            )
            proc.start()
            writer.close()  # EOF on the reader once the worker is gone
            self._procs.append(proc)
            self._readers[reader] = proc
        logger.info("drain workers started pids=%s", ",".join(str(p.pid) for p in self._procs))

    def _watch(self, report: DrainReport) -> None:
        """Read the workers until each pipe is closed; a stop is passed on once,
        an abort of the parent (`DrainAborted`) aborts them and waits 30 s for
        their reports; a worker that did not exit cleanly counts as an error."""
        told = False
        try:
            while self._readers:
                if self._stop.is_set() and not told:
                    told = self._signal_workers()
                self._read_ready(report)
        except DrainAborted:
            if not told:
                self._signal_workers()
            self._signal_workers(ABORT)
            deadline = time.monotonic() + 30
            while self._readers and time.monotonic() < deadline:
                self._read_ready(report)
            raise
        finally:
            for proc in self._procs:
                proc.join(timeout=10)
                if proc.exitcode != 0:
                    logger.error("drain worker died pid=%s exitcode=%s", proc.pid, proc.exitcode)
                    report.errors += 1

    def _signal_workers(self, signum: int = signal.SIGTERM) -> bool:
        """SIGTERM asks each worker to stop after the message in hand; `ABORT`
        aborts it at once. Two signals of one kind sent close together can reach
        a worker as one (one pending slot a signal), so the abort has its own."""
        for proc in self._procs:
            if proc.is_alive() and proc.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signum)
        return True

    def _read_ready(self, report: DrainReport) -> None:
        """What the workers sent in the next 0.2 s (the stop check's period)."""
        for conn in mp_connection.wait(list(self._readers), timeout=0.2):
            self._read(cast("Connection[Any, Any]", conn), report)  # one of those it was given

    def _read(self, conn: Connection[Any, Any], report: DrainReport) -> None:
        try:
            kind, payload = conn.recv()
        except (EOFError, OSError, pickle.UnpicklingError):  # a worker ended, maybe mid-message
            del self._readers[conn]
            conn.close()
            return
        if kind == "outcome":
            self._on_outcome(Outcome(payload))
        elif kind == "report":
            report.merge(payload)

    # -- a worker process

    def _worker_main(self, worker: Worker) -> None:
        """A worker process: SIGINT is left to the parent (which passes a stop on
        as SIGTERM), so one Ctrl-C on a terminal is not counted twice."""
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(ABORT, _abort)
        report = DrainReport(queues=list(self._queues), workers=1)
        try:
            self._work(worker, report)
        except Exception:
            logger.exception("drain worker failed index=%s", worker.index)
            report.errors += 1
        finally:
            worker.finish(report)
            connections.close_all()
