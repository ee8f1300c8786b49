"""A park held back on SQLite, made durable before its key is handed out.

Inside the caller's transaction on SQLite the row cannot be written yet (the
caller holds, or will take, the file's one write lock), so `detached` keeps it
for the block's end. Until then it lives in a spool file beside the database
(`<database>-deadletter-spool/<pid>-<n>.spool`), appended and fsynced at store
time: a write that fails when the block ends (another writer held the lock
past the busy timeout) or a process killed inside the block leaves the file,
and the next fetch, drain or store of any process writes its records.

A record is whole or absent: each carries its length and a CRC32, a failed
append (a short write on a full disk, a failed fsync) is cut off again before
the store fails, and recovery writes the whole records in front of a torn or
damaged one and logs what it discarded. A list parked at once
(`store_failed_msgs(queue, [...])`) is one record holding every message, so
it too is whole or absent; such records go to files named `.spool-batch`,
which a release from before them does not read (it would discard the record
as damaged) and leaves for this one. The folder, once made, is never
removed, so parkers never race on it.

A spool file is held under an exclusive `flock` by the process that writes
it, from its first record until its records are in the table and it is
unlinked (or, where the folder forbids that, emptied); another process takes
only a file it can lock, that still exists and that it can unlink or empty
afterwards, so each record is written by one process, once. A record whose
key is already in the table with the same value was written before its owner
died, and is not written again.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import logging
import os
import struct
import time
import zlib
from collections.abc import Sequence
from pathlib import Path

import cbor2
from django.db import DatabaseError, IntegrityError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter.store import sql
from deadletter.wire import keys

logger = logging.getLogger("deadletter")

SUFFIX = "-deadletter-spool"
TAKEN = "-taken"
"""Added to a spool file's name by a recovery that could not open it for writing."""
SINGLE, BATCH = ".spool", ".spool-batch"
NAMES = (SINGLE, SINGLE + TAKEN, BATCH, BATCH + TAKEN)
_LENGTH = struct.Struct(">I")
_HEAD = struct.Struct(">II")
_CHECKED = 1 << 31
"""Set in a record's length word when a CRC32 of the record follows it (every
record written now; a spool file from before has bare lengths)."""
_names = itertools.count(1)
_directories: dict[str, Path | None] = {}
_left: set[str] = set()

Record = tuple[str, bytes, bytes]


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


def encode_record(queue: str, key: bytes, value: bytes) -> bytes:
    """One record as a spool file holds it: length, CRC32, CBOR `[queue, key, value]`."""
    return _framed(cbor2.dumps([queue, key, value]))


def encode_batch(records: Sequence[Record]) -> bytes:
    """Several parks as one record, whole or absent together: length, CRC32, CBOR
    `[[queue, key, value], ...]`."""
    return _framed(cbor2.dumps([list(record) for record in records]))


def _framed(body: bytes) -> bytes:
    return _HEAD.pack(len(body) | _CHECKED, zlib.crc32(body)) + body


class SpoolFile:
    """One connection's held-back records, in files only this process writes.

    An append that fails leaves the file as it was before it; when even the
    cut fails, that file takes no more records (recovery discards its torn
    tail) and the next append starts another."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.held: list[tuple[Path, int]] = []
        self._size = 0
        self._whole = True
        self._open()

    @property
    def path(self) -> Path:
        """The file the next record goes to."""
        return self.held[-1][0]

    def _open(self, suffix: str = SINGLE) -> None:
        _make_folder(self.folder)
        for _ in range(3):
            path = self.folder / f"{os.getpid()}-{time.time_ns()}-{next(_names)}{suffix}"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                if os.fstat(fd).st_nlink == 0:
                    os.close(fd)  # a recovery took it for an empty leftover before we locked it
                    continue
                _fsync_directory(self.folder)
            except OSError:
                os.close(fd)
                _unlink_quietly(path)
                raise
            self.held.append((path, fd))
            self._size = 0
            self._whole = True
            return
        raise OSError(errno.EAGAIN, f"cannot create a spool file in {self.folder}")

    def append(self, queue: str, key: bytes, value: bytes) -> None:
        """Add one record and fsync it: once this returns, the park survives a
        crash; an `OSError` (a full disk, a failed fsync) keeps no part of it."""
        if not self._whole:
            self._open()
        self._write(encode_record(queue, key, value))

    def append_many(self, records: Sequence[Record]) -> None:
        """Add several parks as one record and fsync it: all of them survive a
        crash once this returns, and none if it raises or the process dies in it."""
        if len(records) == 1:
            self.append(*records[0])
            return
        if not self._whole or not self.path.name.endswith(BATCH):
            self._open(BATCH)
        self._write(encode_batch(records))

    def _write(self, record: bytes) -> None:
        path, fd = self.held[-1]
        try:
            _write_all(fd, record)
            os.fsync(fd)
        except OSError:
            try:
                os.ftruncate(fd, self._size)
                os.fsync(fd)
            except OSError:
                self._whole = False
                logger.exception("spool record not cut back; the file takes no more file=%s", path)
            raise
        self._size += len(record)

    def remove(self) -> None:
        """The records are in the table: each file goes (or is emptied, where
        the folder forbids removing it), then its lock."""
        while self.held:
            path, fd = self.held.pop()
            try:
                _discard(path, fd)
            finally:
                os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[written:]


def _make_folder(folder: Path) -> None:
    try:
        os.mkdir(folder)
    except FileExistsError:
        return
    _fsync_directory(folder.parent)


def _fsync_directory(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def _discard(path: Path, writable: int | None) -> None:
    """Unlink a written file; where that is refused, empty it through `writable`
    (an fd open for writing) so that no recovery writes its records again."""
    try:
        path.unlink()
        return
    except FileNotFoundError:
        return
    except OSError as exc:
        if writable is None:
            logger.error(
                "spool file written but not removable nor emptiable; its records "
                "will be written again file=%s error=%s",
                path,
                exc,
            )
            return
        refused = exc
    try:
        os.ftruncate(writable, 0)
    except OSError:
        logger.exception(
            "spool file written but neither removed (%s) nor emptied; its records will be "
            "written again file=%s",
            refused,
            path,
        )
        return
    logger.warning("spool file written and emptied, not removed file=%s error=%s", path, refused)


def read_records(data: bytes, source: object = "") -> list[Record]:
    """The whole records of a spool file up to the first torn or damaged one
    (a process killed mid-append, before its store returned a key), which is
    discarded with all after it, and logged."""
    records: list[Record] = []
    at = 0
    while at < len(data):
        parsed = _parse(data, at)
        if parsed is None:
            logger.error(
                "spool record torn or damaged; discarded offset=%d bytes=%d records_kept=%d "
                "file=%s",
                at,
                len(data) - at,
                len(records),
                source,
            )
            break
        found, at = parsed
        records += found
    return records


def _parse(data: bytes, at: int) -> tuple[list[Record], int] | None:
    if at + _LENGTH.size > len(data):
        return None
    (head,) = _LENGTH.unpack_from(data, at)
    if head & _CHECKED:
        if at + _HEAD.size > len(data):
            return None
        size, crc = _HEAD.unpack_from(data, at)
        start, size = at + _HEAD.size, size & ~_CHECKED
    else:
        start, size, crc = at + _LENGTH.size, head, None
    end = start + size
    body = data[start:end]
    if end > len(data) or (crc is not None and zlib.crc32(body) != crc):
        return None
    try:
        decoded = cbor2.loads(body)
        batch = decoded if decoded and isinstance(decoded[0], list) else [decoded]
        return [(str(queue), bytes(key), bytes(value)) for queue, key, value in batch], end
    except (cbor2.CBORDecodeError, ValueError, TypeError, IndexError, KeyError):
        return None


def recover(connection: BaseDatabaseWrapper) -> int:
    """Write the records of every spool file no live process holds; the count
    written. Never raises: a file that cannot be written now stays for later."""
    folder = directory(connection)
    if folder is None:
        return 0
    if not os.access(folder, os.F_OK):
        return 0  # the common case, asked without an exception: nothing was ever held back
    try:
        entries = [entry.path for entry in os.scandir(folder) if entry.name.endswith(NAMES)]
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
    writable: int | None = None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0  # its process is alive and writes it itself
        status = os.fstat(fd)
        if status.st_nlink == 0:
            return 0  # written and removed while we waited
        if status.st_size == 0:
            _unlink_quietly(path)  # nothing in it: never written to, or emptied once written
            return 0
        writable = _writable(path)
        if writable is None:
            taken = _take(path)
            if taken is None:
                return 0
            path = taken
        records = read_records(_read_all(fd), path)
        try:
            with transaction.atomic(using=connection.alias):
                for queue, key, value in records:
                    _write_once(connection, queue, key, value)
        except DatabaseError:
            logger.exception("spooled parks not written yet; kept file=%s", path)
            return 0
        _discard(path, writable)
        _left.discard(str(path).removesuffix(TAKEN))
        logger.warning(
            "spooled parks written after their process ended records=%d file=%s",
            len(records),
            path,
        )
        return len(records)
    finally:
        if writable is not None:
            os.close(writable)
        os.close(fd)


def _take(path: Path) -> Path | None:
    """A file this process cannot empty, renamed out of the way as proof that it
    can remove it once written; None (logged once) where it cannot: its
    records are left for a process that can."""
    if path.name.endswith(TAKEN):
        return path
    taken = path.with_name(path.name + TAKEN)
    try:
        os.rename(path, taken)
    except OSError as exc:
        if str(path) not in _left:
            _left.add(str(path))
            logger.error(
                "spool file this process can neither remove nor empty; its records are "
                "left for a process that can (check the folder's owner, mode and "
                "attributes) file=%s error=%s",
                path,
                exc,
            )
        return None
    return taken


def _writable(path: Path) -> int | None:
    """`path` open for writing (to empty it once written, should unlinking be
    refused); None where the file is immutable, read-only or not ours."""
    try:
        return os.open(path, os.O_WRONLY)
    except OSError:
        return None


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


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
