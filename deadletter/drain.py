"""Hand parked messages back to their handlers, at least once.

A handler is `handle(msg) -> Message | None` named per queue in
`DEADLETTER_HANDLERS`; what it does decides the row's fate (see `deliver`).
A row is removed only after its handler returned, so a crash at any point
hands the message in hand over again and loses nothing.

Two ways to walk a queue, picked by the database:

* SQLite has no row locks: one drain per queue at a time, guarded by a lock
  file beside the database (`QueueLock`). Rows are read in pages with no
  transaction open, and each outcome is its own short write, so no write
  lock is held while a handler runs and the code that parks failures never
  waits on a slow handler.
* PostgreSQL claims each row with `SELECT ... FOR UPDATE SKIP LOCKED` in the
  transaction that also settles it, so any number of drains (`workers`
  processes here, or drains on other machines) share a queue and a drain
  that dies releases its row to the others.

Either way a run only visits the rows that were there when it started (up
to each queue's tail key then), so a message parked again during the run,
or partly delivered and re-parked at the tail, waits for the next run.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import enum
import errno
import hashlib
import logging
import multiprocessing
import os
import pickle
import signal
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from multiprocessing import connection as mp_connection
from pathlib import Path
from types import FrameType
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connections
from django.utils.module_loading import import_string

from deadletter import keys, queue, signals
from deadletter.conf import conf
from deadletter.exceptions import DeadletterError, PermanentFailure
from deadletter.messages import Message

__all__ = [
    "DrainAborted",
    "DrainConfigError",
    "DrainLocked",
    "DrainReport",
    "Drainer",
    "Handler",
    "HandlerProblem",
    "Outcome",
    "QueueLock",
    "SignalGuard",
    "deliver",
    "handler_problems",
    "load_handlers",
    "redeliver",
]

logger = logging.getLogger("deadletter")

Handler = Callable[[Message], Message | None]

ATTEMPTS_KEY = "Attempts"
LAST_ERROR_KEY = "LastError"
LAST_ERROR_LIMIT = 1024
DROP_REASONS = ("expired", "corrupt", "permanent", "max_attempts")
PROGRESS_EVERY = 5.0


class DrainConfigError(ImproperlyConfigured, DeadletterError):
    """The drain cannot start as configured (handlers, options); no row was touched."""


class DrainLocked(DeadletterError):
    """Another drain holds a queue of this SQLite database."""


class DrainAborted(BaseException):  # noqa: N818  (like KeyboardInterrupt: not an error to catch)
    """A second stop signal: stop at once, leaving the message in hand queued.

    A BaseException, so a handler's `except Exception` does not swallow it.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.report: DrainReport | None = None

    @property
    def signame(self) -> str:
        return signal.Signals(self.signum).name


class Outcome(enum.StrEnum):
    DELIVERED = "delivered"
    REQUEUED = "requeued"
    FAILED = "failed"
    PERMANENT = "permanent"
    MAX_ATTEMPTS = "max_attempts"
    EXPIRED = "expired"
    CORRUPT = "corrupt"


# --- handlers ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class HandlerProblem:
    """One thing wrong with `DEADLETTER_HANDLERS`: `kind` is "setting", "import" or "callable"."""

    queue: str
    path: Any
    kind: str
    detail: str

    def __str__(self) -> str:
        if self.kind == "setting":
            return self.detail
        return f"handler {self.path!r} of queue {self.queue!r} {self.detail}"


def handler_problems(handlers: Any) -> list[HandlerProblem]:
    """Everything that keeps `handlers` (the setting's value) from being used;
    imports each handler, which is why the system check and the drain share it."""
    if not isinstance(handlers, Mapping):
        return [
            HandlerProblem(
                "",
                handlers,
                "setting",
                "DEADLETTER_HANDLERS must be a dict of queue name to dotted path, "
                f"got {type(handlers).__name__}",
            )
        ]
    problems: list[HandlerProblem] = []
    for name, path in handlers.items():
        try:
            keys.encode_queue_name(name)
        except ValueError as exc:
            problems.append(
                HandlerProblem(str(name), path, "setting", f"DEADLETTER_HANDLERS: {exc}")
            )
            continue
        if not isinstance(path, str) or not path:
            problems.append(
                HandlerProblem(
                    name,
                    path,
                    "setting",
                    f"DEADLETTER_HANDLERS[{name!r}] must be a dotted path string, got {path!r}",
                )
            )
            continue
        try:
            handler = import_string(path)
        except Exception as exc:  # a handler module may fail to import in any way
            problems.append(
                HandlerProblem(
                    name, path, "import", f"does not import: {type(exc).__name__}: {exc}"
                )
            )
            continue
        if not callable(handler):
            problems.append(
                HandlerProblem(
                    name, path, "callable", f"is a {type(handler).__name__}, not callable"
                )
            )
    return problems


def load_handlers(queues: Sequence[str] | None = None) -> dict[str, tuple[str, Handler]]:
    """Queue -> (dotted path, handler) for `queues` (every configured queue by
    default), or `DrainConfigError` naming every problem, before any row is read."""
    configured = conf.HANDLERS
    problems = handler_problems(configured)
    if problems:
        raise DrainConfigError("; ".join(str(p) for p in problems))
    wanted = list(dict.fromkeys(queues)) if queues else list(configured)
    missing = [name for name in wanted if name not in configured]
    if missing:
        raise DrainConfigError(
            f"no handler configured for queue(s) {', '.join(map(repr, missing))}; "
            "add them to DEADLETTER_HANDLERS"
        )
    return {name: (configured[name], import_string(configured[name])) for name in wanted}


# --- one message ---------------------------------------------------------------


def deliver(
    item: queue.Queued,
    handler: Handler,
    *,
    max_attempts: int | None = None,
    savepoint: bool = False,
) -> Outcome:
    """Hand one message to `handler` and settle its row by what happened.

    * returns None: delivered, the row is dequeued;
    * returns a Message: partly delivered, it replaces the row as a fresh row
      at the tail (one transaction; `queued_at` kept from the original, since
      it anchors the age limit);
    * raises `PermanentFailure`: the row is dropped;
    * raises anything else: the row stays under its key with `Attempts` raised
      and `LastError` recorded, or is dropped once `max_attempts` is reached.

    With `savepoint` the handler runs in a savepoint, so database writes of a
    failing handler inside the caller's claim transaction are undone while
    the failure is still recorded. A `BaseException` (`DrainAborted`) passes
    through and leaves the row as it was.
    """
    try:
        if savepoint:
            with queue.atomic():
                result = handler(item.msg)
        else:
            result = handler(item.msg)
        if result is not None and not isinstance(result, Message):
            raise TypeError(f"handler returned {type(result).__name__}, not a Message or None")
    except PermanentFailure as exc:
        logger.warning(
            "permanent failure queue=%s key=%s error=%s",
            keys.queue_of(item.key),
            item.key.hex(),
            _last_error(exc),
        )
        return _settle(
            item, Outcome.PERMANENT, lambda: queue.drop_msg(item.key, item.msg, "permanent")
        )
    except Exception as exc:
        return _failed(item, exc, max_attempts)
    if result is None:
        queue.dequeue(item.key)
        return Outcome.DELIVERED
    remainder = result.replace(queued_at=item.msg.queued_at or result.queued_at)
    return _settle(item, Outcome.REQUEUED, lambda: queue.replace_msg(item.key, remainder))


def _failed(item: queue.Queued, exc: Exception, max_attempts: int | None) -> Outcome:
    attempts = _attempts(item.msg) + 1
    error = _last_error(exc)
    extra = dict(item.msg.extra)
    extra[ATTEMPTS_KEY] = attempts
    extra[LAST_ERROR_KEY] = error
    msg = item.msg.replace(extra=extra)
    name = keys.queue_of(item.key)
    if max_attempts is not None and attempts >= max_attempts:
        logger.warning(
            "dropping message after max attempts queue=%s key=%s attempts=%s error=%s",
            name,
            item.key.hex(),
            attempts,
            error,
        )
        return _settle(
            item, Outcome.MAX_ATTEMPTS, lambda: queue.drop_msg(item.key, msg, "max_attempts")
        )
    logger.warning(
        "delivery failed queue=%s key=%s attempts=%s error=%s",
        name,
        item.key.hex(),
        attempts,
        error,
    )
    _settle(item, Outcome.FAILED, lambda: queue.rewrite_msg(item.key, msg))
    return Outcome.FAILED


def _settle(item: queue.Queued, outcome: Outcome, write: Callable[[], object]) -> Outcome:
    """Apply an outcome's row change; if it cannot be written the row stays as
    it was, to be handed over again: the message counts as still failed."""
    try:
        write()
    except queue.QueueingError:
        logger.exception("could not settle message key=%s outcome=%s", item.key.hex(), outcome)
        return Outcome.FAILED
    return outcome


def _attempts(msg: Message) -> int:
    value = msg.extra.get(ATTEMPTS_KEY)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return 0


def _last_error(exc: BaseException) -> str:
    """`ExcClass: message`, cut to `LAST_ERROR_LIMIT` UTF-8 bytes on a character boundary."""
    text = f"{type(exc).__name__}: {exc}"
    raw = text.encode("utf-8", errors="replace")
    if len(raw) <= LAST_ERROR_LIMIT:
        return text
    return raw[:LAST_ERROR_LIMIT].decode("utf-8", errors="ignore")


# --- a run's tally --------------------------------------------------------------


@dataclasses.dataclass
class DrainReport:
    """What one run did; `exit_code` is the command's: 1 when a message stayed failed."""

    queues: list[str]
    workers: int = 1
    delivered: int = 0
    requeued: int = 0
    failed: int = 0
    dropped: dict[str, int] = dataclasses.field(
        default_factory=lambda: dict.fromkeys(DROP_REASONS, 0)
    )
    errors: int = 0
    elapsed: float = 0.0
    stopped_by: str | None = None
    aborted_by: str | None = None

    @property
    def handled(self) -> int:
        """Messages handed to a handler."""
        return (
            self.delivered
            + self.requeued
            + self.failed
            + self.dropped["permanent"]
            + self.dropped["max_attempts"]
        )

    @property
    def exit_code(self) -> int:
        return 1 if self.failed or self.errors else 0

    def add(self, outcome: Outcome) -> None:
        if outcome is Outcome.DELIVERED:
            self.delivered += 1
        elif outcome is Outcome.REQUEUED:
            self.requeued += 1
        elif outcome is Outcome.FAILED:
            self.failed += 1
        else:
            self.dropped[str(outcome)] += 1

    def merge(self, other: Mapping[str, Any]) -> None:
        for name in ("delivered", "requeued", "failed", "errors"):
            setattr(self, name, getattr(self, name) + int(other.get(name, 0)))
        for reason, count in other.get("dropped", {}).items():
            self.dropped[reason] = self.dropped.get(reason, 0) + int(count)
        self.stopped_by = self.stopped_by or other.get("stopped_by")
        self.aborted_by = self.aborted_by or other.get("aborted_by")

    def as_dict(self) -> dict[str, Any]:
        return {
            "queues": list(self.queues),
            "workers": self.workers,
            "delivered": self.delivered,
            "requeued": self.requeued,
            "dropped": dict(self.dropped),
            "failed": self.failed,
            "errors": self.errors,
            "elapsed": round(self.elapsed, 3),
            "rate": round(self.handled / self.elapsed, 1) if self.elapsed > 0 else None,
            "stopped_by": self.stopped_by,
            "aborted_by": self.aborted_by,
        }


# --- run-wide shared state ----------------------------------------------------------


class _Guard:
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


class _Cursor:
    """The highest key this run has claimed in a queue.

    Each claim looks above it and moves it up, under the guard, so the next
    claim of any worker starts past every earlier one: no message, not even
    one that failed and stayed, is handed over twice in one run, and none is
    passed over (the rows skipped between are locked by drains elsewhere).
    """

    _SIZE = keys.MAX_QUEUE_NAME_BYTES + 32

    def __init__(self, guard: _Guard, ctx: Any = None) -> None:
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


class _Budget:
    """What is left of `--limit`: taken before a claim, given back if there was none."""

    def __init__(self, limit: int | None, guard: _Guard, ctx: Any = None) -> None:
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


# --- the SQLite lock ------------------------------------------------------------


class QueueLock:
    """Keeps two drains of one queue of a SQLite database apart, however the
    database file is named (a symlink, a relative path, a hard link).

    SQLite cannot lock a row, and holding its write lock while a handler runs
    would stall every writer, so two drains are kept apart outside SQLite's
    own locks: where Linux has open-file-description locks, a byte-range lock
    on the database file itself, at an offset named for the queue far beyond
    SQLite's lock bytes (the file's identity, whatever the path); and always a
    lock file beside the file's real path (`<db>-drain-<hash of the queue
    name>.lock`), holding the owner's pid for the error message. Both are
    released by the kernel when their process dies, even by SIGKILL, so a
    crashed drain never leaves a stale lock. Locks are taken in queue-name
    order, so two drains never deadlock.
    """

    def __init__(
        self,
        db_file: str,
        queues: Sequence[str],
        *,
        wait: bool = False,
        stop: threading.Event | None = None,
    ) -> None:
        self.db_file = os.path.realpath(db_file)
        self.queues = sorted(set(queues))
        self.wait = wait
        self._stop = stop or threading.Event()
        self._fds: list[int] = []
        self._database_locks: list[tuple[int, int]] = []

    @staticmethod
    def path_for(db_file: str, queue_name: str) -> Path:
        digest = hashlib.sha256(queue_name.encode("utf-8")).hexdigest()[:16]
        return Path(f"{os.path.realpath(db_file)}-drain-{digest}.lock")

    @staticmethod
    def offset_for(queue_name: str) -> int:
        """The byte of the database file locked for `queue_name`: past 2**48, where
        SQLite (whose lock bytes start at 2**30) never reads, writes or locks."""
        digest = hashlib.sha256(queue_name.encode("utf-8")).digest()
        return (1 << 48) + int.from_bytes(digest[:5], "big")

    def __enter__(self) -> QueueLock:
        try:
            for name in self.queues:
                self._acquire(name)
        except BaseException:
            self.release()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _acquire(self, name: str) -> None:
        import fcntl

        path = self.path_for(self.db_file, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise DrainConfigError(f"cannot open the drain lock file {path}: {exc}") from exc
        logged = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = os.pread(fd, 200, 0).decode("utf-8", errors="replace").split()
                pid = holder[0] if holder else "?"
                if not self.wait or self._stop.is_set():
                    os.close(fd)
                    raise DrainLocked(
                        f"queue {name!r} is being drained by another process (pid {pid}); "
                        f"SQLite allows one drain per queue at a time (lock file {path})"
                    ) from None
                if not logged:
                    logger.info("waiting for another drain queue=%s pid=%s", name, pid)
                    logged = True
                self._stop.wait(0.2)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {name}\n".encode(), 0)
        self._fds.append(fd)
        self._lock_in_database_file(name, path)

    def _lock_in_database_file(self, name: str, lock_path: Path) -> None:
        """The same exclusion by the database file's identity (Linux OFD locks)."""
        import fcntl

        command = getattr(fcntl, "F_OFD_SETLK", None)
        if command is None:
            return
        fd = _database_fd(self.db_file)
        offset = self.offset_for(name)
        while True:
            try:
                fcntl.fcntl(fd, command, _flock(fcntl.F_WRLCK, offset))
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise DrainConfigError(f"cannot lock {self.db_file}: {exc}") from exc
                if not self.wait or self._stop.is_set():
                    raise DrainLocked(
                        f"queue {name!r} is being drained by another process through another "
                        f"name of {self.db_file}; SQLite allows one drain per queue at a time "
                        f"(lock file {lock_path})"
                    ) from None
                self._stop.wait(0.2)
        self._database_locks.append((fd, offset))

    def release(self) -> None:
        import fcntl

        while self._database_locks:
            fd, offset = self._database_locks.pop()
            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _flock(fcntl.F_UNLCK, offset))
        while self._fds:
            fd = self._fds.pop()
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


_database_fds: dict[str, int] = {}
_database_fds_lock = threading.Lock()


def _database_fd(db_file: str) -> int:
    """A descriptor of the database file, opened once per process and never closed:
    closing any descriptor of a file drops every POSIX lock the process holds on
    it, SQLite's own included."""
    with _database_fds_lock:
        fd = _database_fds.get(db_file)
        if fd is None:
            try:
                fd = os.open(db_file, os.O_RDWR | os.O_CLOEXEC)  # a write lock needs it
            except OSError as exc:
                raise DrainConfigError(f"cannot open the database {db_file}: {exc}") from exc
            _database_fds[db_file] = fd
        return fd


def _flock(kind: int, offset: int) -> bytes:
    """A `struct flock` for one byte at `offset` (l_pid 0, as OFD locks require)."""
    return struct.pack("hhqqi4x", kind, os.SEEK_SET, offset, 1, 0)


# --- the drain ------------------------------------------------------------------


class Drainer:
    """One drain run over `queues` (every configured queue by default).

    Handlers and options are checked here, before any row is read, so a bad
    configuration raises `DrainConfigError` having touched nothing. `run()`
    returns a `DrainReport`; `stop()` (from a signal handler or another
    thread) ends the run after the message in hand.
    """

    def __init__(
        self,
        queues: Sequence[str] | None = None,
        *,
        limit: int | None = None,
        rate: float | None = None,
        workers: int = 1,
        wait: bool = False,
        batch_size: int = 500,
        on_outcome: Callable[[Outcome], None] | None = None,
        log_progress: bool = True,
    ) -> None:
        if limit is not None and limit < 1:
            raise DrainConfigError(f"limit must be at least 1, got {limit}")
        if rate is not None and not rate > 0:
            raise DrainConfigError(f"rate must be above 0 per second, got {rate}")
        if workers < 1:
            raise DrainConfigError(f"workers must be at least 1, got {workers}")
        max_attempts = _max_attempts()
        self.handlers = load_handlers(queues)
        self.queues = list(self.handlers)
        self.claims = queue.can_claim_rows()
        if workers > 1 and not self.claims:
            raise DrainConfigError(
                f"--workers {workers} needs PostgreSQL: {queue.database_vendor()} cannot lock "
                "single rows (no SELECT ... FOR UPDATE SKIP LOCKED), so only one drain may walk "
                "a queue at a time; run one worker, or move the queue to PostgreSQL to scale out"
            )
        self.limit = limit
        self.rate = rate
        self.workers = workers
        self.wait = wait
        self.batch_size = batch_size
        self.max_attempts = max_attempts
        self.on_outcome = on_outcome
        self.log_progress = log_progress
        self.stopped_by: str | None = None
        self._stop = threading.Event()
        self._until: dict[str, bytes | None] = {}
        self._cursors: dict[str, _Cursor] = {}
        self._guard = _Guard()
        self._budget = _Budget(limit, self._guard)
        self._events: Any = None
        self._parent_pid: int | None = None
        self._next_at = 0.0
        self._progress_at = 0.0

    # -- control

    def stop(self, reason: str = "stop") -> None:
        """End the run after the message in hand (its row is settled first)."""
        if not self._stop.is_set():
            self.stopped_by = reason
            self._stop.set()

    def pending(self) -> int | None:
        """Rows the run would visit now: a progress bar's total (None if unknown)."""
        try:
            return sum(queue.count_rows(name, self._tail(name)) for name in self.queues)
        except DatabaseError:
            return None

    def preview(self) -> Iterator[tuple[str, str, queue.Preview]]:
        """(queue, handler path, preview) for what a run would do, reading only;
        `limit` counts the messages that would be handed over."""
        left = self.limit
        for name in self.queues:
            path = self.handlers[name][0]
            for item in queue.preview_failed_msgs(name, batch_size=self.batch_size):
                if item.verdict == "deliver" and left is not None:
                    if left <= 0:
                        return
                    left -= 1
                yield name, path, item

    # -- the run

    def run(self) -> DrainReport:
        report = DrainReport(queues=list(self.queues), workers=self.workers)
        started = time.monotonic()
        self._progress_at = started + PROGRESS_EVERY
        logger.info(
            "drain started queues=%s workers=%s limit=%s rate=%s",
            ",".join(self.queues),
            self.workers,
            self.limit,
            self.rate,
        )
        try:
            if self.workers > 1:
                self._run_workers(report)
            else:
                with self._queue_lock(), self._counting_drops(report):
                    self._run_here(report)
        except DrainAborted as exc:
            report.aborted_by = exc.signame
            exc.report = report
            raise
        finally:
            report.elapsed = time.monotonic() - started
            report.stopped_by = report.stopped_by or self.stopped_by
            logger.info(
                "drain finished delivered=%s requeued=%s dropped=%s failed=%s errors=%s "
                "elapsed=%.3f stopped_by=%s aborted_by=%s",
                report.delivered,
                report.requeued,
                report.dropped,
                report.failed,
                report.errors,
                report.elapsed,
                report.stopped_by,
                report.aborted_by,
            )
        return report

    def _snapshot(self, report: DrainReport) -> bool:
        """Note each queue's newest key: the run stops there."""
        try:
            self._until = {name: queue.tail_key(name) for name in self.queues}
        except DatabaseError:
            logger.exception("drain cannot read the queues")
            report.errors += 1
            return False
        return True

    def _tail(self, name: str) -> bytes | None:
        if name not in self._until:
            self._until[name] = queue.tail_key(name)
        return self._until[name]

    def _queue_lock(self) -> contextlib.AbstractContextManager[object]:
        db_file = None if self.claims else queue.sqlite_file()
        if db_file is None:
            return contextlib.nullcontext()
        return QueueLock(db_file, self.queues, wait=self.wait, stop=self._stop)

    def _run_here(self, report: DrainReport) -> None:
        if not self._snapshot(report):
            return
        for name in self.queues:
            if self._stop.is_set():
                return
            until = self._until[name]
            if until is None:
                continue
            handler = self.handlers[name][1]
            try:
                if self.claims:
                    self._drain_claiming(name, handler, until, report)
                else:
                    self._drain_scanning(name, handler, until, report)
            except DatabaseError:
                logger.exception("drain of a queue failed queue=%s", name)
                report.errors += 1

    def _drain_scanning(
        self, name: str, handler: Handler, until: bytes, report: DrainReport
    ) -> None:
        for item in queue.iter_failed_msgs(name, batch_size=self.batch_size):
            if item.key > until or not self._may_go_on():
                return
            if not self._budget.take():
                return
            self._pace()
            if self._stop.is_set():
                return
            self._record(report, deliver(item, handler, max_attempts=self.max_attempts))

    def _drain_claiming(
        self, name: str, handler: Handler, until: bytes, report: DrainReport
    ) -> None:
        cursor = self._cursors.setdefault(name, _Cursor(self._guard))

        def take(after: bytes | None) -> queue.Queued | None:
            return queue.claim_failed_msg(name, after=after, until=until)

        while self._may_go_on():
            if not self._budget.take():
                return
            self._pace()
            if self._stop.is_set():
                self._budget.give_back()
                return
            with queue.atomic():
                item = cursor.claim(take)
                if item is None:
                    self._budget.give_back()
                    return
                outcome = deliver(item, handler, max_attempts=self.max_attempts, savepoint=True)
            self._record(report, outcome)

    def _may_go_on(self) -> bool:
        if self._stop.is_set():
            return False
        if self._parent_pid is not None and os.getppid() != self._parent_pid:
            logger.warning("drain worker lost its parent; stopping pid=%s", os.getpid())
            self.stop("parent gone")
            return False
        return True

    def _pace(self) -> None:
        """Hold deliveries to `rate` per second (split among the workers)."""
        if self.rate is None:
            return
        now = time.monotonic()
        if self._next_at > now:
            self._stop.wait(self._next_at - now)
            now = time.monotonic()
        self._next_at = max(self._next_at, now) + self.workers / self.rate

    def _record(self, report: DrainReport, outcome: Outcome) -> None:
        report.add(outcome)
        self._notify(outcome)
        if self.log_progress and self._events is None:
            now = time.monotonic()
            if now >= self._progress_at:
                self._progress_at = now + PROGRESS_EVERY
                logger.info(
                    "drain progress handled=%s delivered=%s requeued=%s failed=%s dropped=%s",
                    report.handled,
                    report.delivered,
                    report.requeued,
                    report.failed,
                    sum(report.dropped.values()),
                )

    def _notify(self, outcome: Outcome) -> None:
        if self._events is not None:
            self._send(("outcome", outcome.value))
        elif self.on_outcome is not None:
            self.on_outcome(outcome)

    def _counting_drops(self, report: DrainReport) -> contextlib.AbstractContextManager[None]:
        return _counting_drops(report, self.queues, self._notify)

    # -- worker processes (PostgreSQL)

    def _run_workers(self, report: DrainReport) -> None:
        """Fork `workers` processes that claim rows side by side; each reports
        over its own pipe (no lock shared with a worker that may be killed)."""
        ctx = multiprocessing.get_context("fork")
        fd, guard_path = tempfile.mkstemp(prefix="deadletter-drain-", suffix=".lock")
        os.close(fd)
        try:
            self._guard = _Guard(guard_path)
            if not self._snapshot(report):
                return
            self._cursors = {name: _Cursor(self._guard, ctx) for name in self.queues}
            self._budget = _Budget(self.limit, self._guard, ctx)
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
                    time.sleep(0.05)  # two SIGTERMs at once may arrive as one
                self._signal_workers(procs)
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

    def _signal_workers(self, procs: Sequence[Any]) -> bool:
        for proc in procs:
            if proc.is_alive() and proc.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
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
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            self._events.send(message)
        except (OSError, ValueError):
            pass
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def _worker_main(self, index: int, events: Any, parent_pid: int) -> None:
        """A worker process: SIGINT is left to the parent (which passes a stop on
        as SIGTERM), so one Ctrl-C on a terminal is not counted twice."""
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        self._stop = threading.Event()
        self.stopped_by = None
        self._events = events
        self._parent_pid = parent_pid
        self._next_at = 0.0
        report = DrainReport(queues=list(self.queues), workers=1)
        try:
            with SignalGuard(self, (signal.SIGTERM,)), self._counting_drops(report):
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


@contextlib.contextmanager
def _counting_drops(
    report: DrainReport, names: Sequence[str], notify: Callable[[Outcome], None] | None = None
) -> Iterator[None]:
    """Count the rows the queue layer drops on the way (expired, corrupt) from
    its `message_dropped` signal; the drain's own drops are counted by outcome."""
    thread = threading.get_ident()
    wanted = set(names)

    def receiver(sender: str, reason: str | None = None, **kwargs: Any) -> None:
        if (
            threading.get_ident() == thread
            and sender in wanted
            and reason in ("expired", "corrupt")
        ):
            outcome = Outcome(reason)
            report.add(outcome)
            if notify is not None:
                notify(outcome)

    uid = f"deadletter-drain-{id(report)}-{thread}"
    signals.message_dropped.connect(receiver, weak=False, dispatch_uid=uid)
    try:
        yield
    finally:
        signals.message_dropped.disconnect(dispatch_uid=uid)


def redeliver(row_keys: Iterable[bytes], *, wait: bool = False) -> DrainReport:
    """Hand the rows `row_keys` to their queues' handlers now, oldest first, with
    a drain's outcome rules: "retry these" for the admin and the API.

    It keeps to a drain's exclusion rules too: on SQLite it takes the queues'
    lock files (`DrainLocked` while a drain runs, unless `wait`); on
    PostgreSQL it claims each row, and a row another drain holds is left to
    it. A row that is gone, or held, is not counted. Raises `DrainConfigError`
    for a queue without a usable handler, before touching any row.
    """
    selected = sorted({bytes(k) for k in row_keys})
    names = list(dict.fromkeys(keys.queue_of(k) for k in selected))
    handlers = load_handlers(names) if names else {}
    max_attempts = _max_attempts()
    report = DrainReport(queues=names)
    claims = queue.can_claim_rows()
    db_file = None if claims else queue.sqlite_file()
    started = time.monotonic()
    lock: contextlib.AbstractContextManager[object] = (
        QueueLock(db_file, names, wait=wait) if db_file and names else contextlib.nullcontext()
    )
    with lock, _counting_drops(report, names):
        for key in selected:
            handler = handlers[keys.queue_of(key)][1]
            if claims:
                with queue.atomic():
                    item = queue.fetch_msg(key)
                    if item is None:
                        continue
                    outcome = deliver(item, handler, max_attempts=max_attempts, savepoint=True)
            else:
                item = queue.fetch_msg(key)
                if item is None:
                    continue
                outcome = deliver(item, handler, max_attempts=max_attempts)
            report.add(outcome)
    report.elapsed = time.monotonic() - started
    logger.info(
        "redelivered rows=%s delivered=%s requeued=%s failed=%s dropped=%s",
        len(selected),
        report.delivered,
        report.requeued,
        report.failed,
        sum(report.dropped.values()),
    )
    return report


def _max_attempts() -> int | None:
    value = conf.MAX_ATTEMPTS
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise DrainConfigError(
            f"DEADLETTER_MAX_ATTEMPTS must be None or an int of at least 1, got {value!r}"
        )
    return value


class SignalGuard:
    """SIGINT/SIGTERM for a drain: the first stops it after the message in hand,
    the second raises `DrainAborted` at once (the row in hand stays queued), a
    third exits on the spot in case a handler swallowed the second. Installs
    itself only in the main thread, where Python delivers signals."""

    def __init__(
        self, drainer: Drainer, signums: Sequence[int] = (signal.SIGINT, signal.SIGTERM)
    ) -> None:
        self.drainer = drainer
        self.signums = tuple(signums)
        self.received = 0
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> SignalGuard:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in self.signums}
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received += 1
        name = signal.Signals(signum).name
        if self.received == 1:
            logger.warning("drain stopping after the message in hand signal=%s", name)
            self.drainer.stop(name)
            return
        if self.received == 2:
            logger.warning("drain aborting; the message in hand stays queued signal=%s", name)
            raise DrainAborted(signum)
        os._exit(128 + signum)
