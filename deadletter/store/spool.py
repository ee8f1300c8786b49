"""A park held back on SQLite, made durable before its key is handed out.

Inside the caller's transaction on SQLite the row cannot be written yet (the
caller holds, or will take, the file's one write lock), so `detached` keeps it
for the block's end. Until then it lives in a spool file beside the database
(`<database>-deadletter-spool/<pid>-<n>.spool`), appended and fsynced at store
time: a write that fails when the block ends (another writer held the lock
past the busy timeout) or a process killed inside the block leaves the file,
and the next fetch, drain or store of any process writes its records.

A spool file is held under an exclusive `flock` by the process that writes
it, from its first record until its records are in the table and it is
unlinked; another process takes only a file it can lock and that still
exists, so each record is written by one process, once. A record whose key
is already in the table with the same value was written before its owner
died, and is not written again.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import logging
import os
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import cbor2
from django.db import DatabaseError, IntegrityError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter.store import sql
from deadletter.wire import keys

logger = logging.getLogger("deadletter")

SUFFIX = "-deadletter-spool"
_LENGTH = struct.Struct(">I")
_names = itertools.count(1)
_directories: dict[str, Path | None] = {}


def directory(connection: BaseDatabaseWrapper) -> Path | None:
    """The spool directory of `connection`'s SQLite file; None for another
    database or an in-memory one, where nothing outlives the process anyway."""
    if connection.vendor != "sqlite":
        return None
    name = str(connection.settings_dict["NAME"])
    try:
        return _directories[name]
    except KeyError:
        pass
    in_memory = getattr(connection, "is_in_memory_db", lambda: True)()
    found = None if in_memory else Path(os.path.abspath(name) + SUFFIX)
    _directories[name] = found
    return found


class SpoolFile:
    """One connection's held-back records, in a file only this process writes."""

    def __init__(self, folder: Path) -> None:
        for _ in range(3):
            folder.mkdir(exist_ok=True)
            self.path = folder / f"{os.getpid()}-{time.time_ns()}-{next(_names)}.spool"
            try:
                self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND)
                break
            except FileNotFoundError:
                continue  # another process removed the empty folder in between
        else:
            raise OSError(f"cannot create a spool file in {folder}")
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        _fsync_directory(folder)

    def append(self, queue: str, key: bytes, value: bytes) -> None:
        """Add one record and fsync it: once this returns, the park survives a crash."""
        record = cbor2.dumps([queue, key, value])
        os.write(self.fd, _LENGTH.pack(len(record)) + record)
        os.fsync(self.fd)

    def remove(self) -> None:
        """The records are in the table: the file goes, then its lock."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        os.close(self.fd)
        with contextlib.suppress(OSError):
            self.path.parent.rmdir()  # only when empty


def _fsync_directory(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_records(data: bytes) -> Iterator[tuple[str, bytes, bytes]]:
    """The whole records of a spool file; a torn last one (killed mid-append,
    before its store returned a key) is left out."""
    at = 0
    while at + _LENGTH.size <= len(data):
        (size,) = _LENGTH.unpack_from(data, at)
        end = at + _LENGTH.size + size
        if end > len(data):
            return
        try:
            queue, key, value = cbor2.loads(data[at + _LENGTH.size : end])
        except (cbor2.CBORDecodeError, ValueError, TypeError):
            logger.error("spool record unreadable; skipped offset=%d", at)
        else:
            yield str(queue), bytes(key), bytes(value)
        at = end


def recover(connection: BaseDatabaseWrapper) -> int:
    """Write the records of every spool file no live process holds; the count
    written. Never raises: a file that cannot be written now stays for later."""
    folder = directory(connection)
    if folder is None or not os.access(folder, os.F_OK):  # the common case: no folder
        return 0
    try:
        entries = [entry.path for entry in os.scandir(folder) if entry.name.endswith(".spool")]
    except FileNotFoundError:
        return 0
    written = 0
    for path in entries:
        try:
            written += _recover_file(connection, Path(path))
        except FileNotFoundError:
            continue  # written and removed by its owner or another process
        except OSError:
            logger.exception("spool file unreadable; kept file=%s", path)
    return written


def _recover_file(connection: BaseDatabaseWrapper, path: Path) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0  # its process is alive and writes it itself
        if os.fstat(fd).st_nlink == 0:
            return 0  # written and removed while we waited
        data = path.read_bytes()
        records = list(read_records(data))
        try:
            with transaction.atomic(using=connection.alias):
                for queue, key, value in records:
                    _write_once(connection, queue, key, value)
        except DatabaseError:
            logger.exception("spooled parks not written yet; kept file=%s", path)
            return 0
        path.unlink()
        logger.warning(
            "spooled parks written after their process ended records=%d file=%s",
            len(records),
            path,
        )
        return len(records)
    finally:
        os.close(fd)


def _write_once(connection: BaseDatabaseWrapper, queue: str, key: bytes, value: bytes) -> None:
    """Insert a spooled record unless the table holds it already; a key taken by
    another message meanwhile gets the record a fresh key."""
    insert = sql.statement(connection, "INSERT INTO {table} ({key}, value) VALUES (%s, %s)")
    existing = sql.read(
        connection, sql.statement(connection, "SELECT value FROM {table} WHERE {key} = %s"), (key,)
    )
    if existing and bytes(existing[0][0]) == value:
        return
    prefix = keys.encode_queue_name(queue)
    candidate = key if not existing else keys.new_key(prefix)
    for _ in range(10):
        try:
            with transaction.atomic(using=connection.alias):
                sql.write(connection, insert, (candidate, value))
            return
        except IntegrityError:
            candidate = keys.new_key(prefix)
    raise DatabaseError(f"no free key for a spooled message of queue {queue!r}")
