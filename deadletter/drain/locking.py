"""The SQLite drain lock: one drain per queue of a database file, however named."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import struct
import threading
from collections.abc import Sequence
from pathlib import Path

from deadletter.drain.errors import DrainConfigError, DrainLocked

__all__ = ["QueueLock"]

logger = logging.getLogger("deadletter")


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
