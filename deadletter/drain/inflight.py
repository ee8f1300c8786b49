"""Which message each handler of this process has in hand, in a small file of
fixed slots, so that a process killed mid-handler (SIGKILL, the OOM killer) still
counts that attempt: a poison message reaches its attempt limit instead of
killing drain after drain for ever.

Before a handler runs, its key goes into a free slot of the process's journal
(a store into its shared memory map, no system call, no fsync); when the handler
returns or raises the slot is cleared (another store), before the settlement, so
a journaled key always means "its handler was running": a process killed between
the handler's end and the settlement's commit leaves the row as it was and no
attempt is counted twice. No fsync is needed: a SIGKILL or an OOM kill ends the process, not the
kernel, and the page cache it wrote keeps the slot for the next reader; only a
crash of the machine itself loses it (then that one attempt is not counted).

A journal lives beside the spool files of its database (`store.spool`'s folder
next to a SQLite file) or, for a server database, in a per-machine folder of the
system's temporary directory named after the database. Its process holds it
under an exclusive `flock` for its lifetime; the kernel drops the lock when the
process dies, so a journal whose lock another process can take is a dead one's
(no pid to compare, none reused). `recover` (a drain pass's start) takes such
journals and settles each key through the caller.

A dead process on another machine leaves its journal on that machine: its
killed attempt is counted when that machine's next drain starts.

`in_hand` reads the live journals: on SQLite, where a drain holds no row lock while
its handler runs, an edit asks it so that it is refused there as the servers' row
locks refuse it. Reading takes no lock and writes nothing: a slot being written as it
is read fails its CRC and is skipped, and the settlement's compare-and-write
(`settlements`) keeps an edit that comes through such a gap.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import logging
import mmap
import os
import struct
import tempfile
import threading
import time
import zlib
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter.models import KEY_BYTES
from deadletter.store import spool, sql

__all__ = [
    "SLOT",
    "SLOTS",
    "SUFFIX",
    "Journal",
    "Killed",
    "folder_of",
    "in_hand",
    "journal",
    "recover",
]

logger = logging.getLogger("deadletter")

SUFFIX = ".inflight"
SLOT = 512
"""Bytes a slot takes: a divisor of the page size, so a slot's write never spans two pages."""
SLOTS = 1024
"""Slots a process's journal has: handlers it can have in hand at once (a drain's lanes,
a web server's threads), each journaled."""
_CRC = struct.Struct(">I")
_BODY = struct.Struct(">qHB")  # start (ns since epoch), key length, actor length
_HEAD = struct.Struct(">IqHB")  # the CRC32 of the rest, then the body's head
_EMPTY = bytes(SLOT)
_ACTOR_BYTES = SLOT - _HEAD.size - KEY_BYTES


@dataclasses.dataclass(frozen=True, slots=True)
class Killed:
    """A key whose handler was running when its process died."""

    key: bytes
    started_at: datetime
    actor: str
    pid: int


class Journal:
    """This process's slots, one per handler in hand, in a shared memory map of its
    file: `enter` and `leave` are what a message costs (two stores into the page
    cache, no system call). Never raises: a key it cannot take is not journaled."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.pid = os.getpid()
        self._free = list(range(SLOTS - 1, -1, -1))
        self._full = False
        self.path, self.fd = _create(folder)
        try:
            os.posix_fallocate(self.fd, 0, SLOTS * SLOT)  # no page to allocate on a store
            self._map = mmap.mmap(self.fd, SLOTS * SLOT, mmap.MAP_SHARED)
        except OSError:
            os.close(self.fd)
            self.path.unlink(missing_ok=True)
            raise

    def enter(self, key: bytes, actor: bytes) -> int | None:
        """Journal `key` (its handler starts now) with `actor` (UTF-8, cut to fit);
        the slot to `leave`, or None when the key is not journaled (every slot taken,
        logged once)."""
        if len(key) > KEY_BYTES:
            return None
        try:
            slot = self._free.pop()
        except IndexError:
            if not self._full:
                self._full = True
                logger.warning("handler journal full slots=%s; more are not journaled", SLOTS)
            return None
        actor = actor[:_ACTOR_BYTES]
        rest = _BODY.pack(time.time_ns(), len(key), len(actor)) + key + actor
        at = slot * SLOT
        self._map[at + _CRC.size : at + _CRC.size + len(rest)] = rest
        self._map[at : at + _CRC.size] = _CRC.pack(zlib.crc32(rest))
        return slot

    def leave(self, slot: int | None) -> None:
        """Clear `slot` (the whole of it: no key is left behind): its handler returned
        or raised."""
        if slot is None:
            return
        at = slot * SLOT
        self._map[at : at + SLOT] = _EMPTY
        self._free.append(slot)

    def close(self) -> None:
        """Drop this process's hold on the file (a forked child's inherited copy)."""
        with contextlib.suppress(OSError, ValueError):
            self._map.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)


def _create(folder: Path) -> tuple[Path, int]:
    """A new journal file of this process, locked; retried when a recovery took the
    empty file for a dead one's between its creation and the lock."""
    folder.mkdir(parents=True, exist_ok=True)
    for _ in range(3):
        path = folder / f"{os.getpid()}-{time.time_ns()}{SUFFIX}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_nlink:
                return path, fd
        except OSError:
            os.close(fd)
            raise
        os.close(fd)
    raise OSError(errno.EAGAIN, "handler journal removed as it was made, three times", str(folder))


_journals: dict[str, Journal | None] = {}
_making = threading.Lock()


def folder_of(connection: BaseDatabaseWrapper) -> Path | None:
    """Where the journals of processes using `connection`'s database live; None for an
    in-memory SQLite database, where nothing outlives the process anyway."""
    if connection.vendor == "sqlite":
        return spool.directory(connection)
    settings = connection.settings_dict
    where = f"{connection.vendor}|{settings.get('HOST')}|{settings.get('PORT')}|{settings['NAME']}"
    digest = hashlib.sha256(where.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"deadletter-inflight-{digest}"


def journal() -> Journal | None:
    """This process's journal for the queue's database, made on first use (a
    forked child makes its own, and lets go of its parent's); None where there is
    none to keep, or it cannot be made (logged)."""
    connection = sql.connection()
    alias = connection.alias
    found = _journals.get(alias)
    if found is not None and found.pid == os.getpid():
        return found
    with _making:
        found = _journals.get(alias)
        if found is not None and found.pid == os.getpid():
            return found
        if found is not None:
            found.close()
        elif alias in _journals:
            return None
        folder = folder_of(connection)
        made: Journal | None = None
        if folder is not None:
            try:
                made = Journal(folder)
            except OSError:
                logger.exception("cannot make a handler journal in %s", folder)
        _journals[alias] = made
        return made


def recover(settle: Callable[[Killed], bool], wanted: Callable[[bytes], bool]) -> int:
    """Settle the keys that dead processes' journals hold (those `wanted`, the queues
    this drain hands over): `settle` returns whether the key is done (False: keep it
    for a later pass, its row held elsewhere). A journal is removed once it holds
    no key. Returns how many keys were settled; `settle`'s errors pass through,
    the journal kept."""
    folder = folder_of(sql.connection())
    if folder is None:
        return 0
    try:
        entries = [entry.path for entry in os.scandir(folder) if entry.name.endswith(SUFFIX)]
    except FileNotFoundError:
        return 0
    own = _journals.get(sql.connection().alias)
    settled = 0
    for path in entries:
        if own is not None and Path(path).name == own.path.name:
            continue  # its lock would refuse us anyway
        settled += _recover_file(Path(path), settle, wanted)
    return settled


def _recover_file(
    path: Path, settle: Callable[[Killed], bool], wanted: Callable[[bytes], bool]
) -> int:
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return 0
    settled = 0
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0  # its process is alive
        if os.fstat(fd).st_nlink == 0:
            return 0  # another recovery removed it
        data = _read_all(fd)
        pid = _pid_of(path)
        left = 0
        for offset in range(0, len(data) - _HEAD.size + 1, SLOT):
            killed = _parse(data, offset, pid)
            if killed is None:
                continue
            if not wanted(killed.key) or not settle(killed):
                left += 1
                continue
            os.pwrite(fd, _EMPTY, offset)
            settled += 1
        if not left:
            path.unlink()
    finally:
        os.close(fd)
    return settled


def _parse(data: bytes, offset: int, pid: int) -> Killed | None:
    """The slot at `offset`: None when empty or torn (its CRC does not match)."""
    crc, started_ns, key_length, actor_length = _HEAD.unpack_from(data, offset)
    if not key_length:
        return None
    end = offset + _HEAD.size + key_length + actor_length
    if key_length > KEY_BYTES or end > len(data) or end > offset + SLOT:
        return None
    if zlib.crc32(data[offset + 4 : end]) != crc:
        logger.warning("handler journal slot torn offset=%s", offset)
        return None
    body = data[offset + _HEAD.size : end]
    return Killed(
        key=bytes(body[:key_length]),
        started_at=datetime.fromtimestamp(started_ns / 1e9, UTC),
        actor=body[key_length:].decode("utf-8", errors="ignore"),
        pid=pid,
    )


def _pid_of(path: Path) -> int:
    head = path.name.split("-", 1)[0]
    return int(head) if head.isdigit() else 0


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def in_hand(key: bytes) -> bool:
    """Whether a live process's handler has the message of row `key` in hand now
    (this process's own included). Never raises: a journal it cannot read is skipped."""
    folder = folder_of(sql.connection())
    if folder is None:
        return False
    key = bytes(key)
    try:
        paths = [entry.path for entry in os.scandir(folder) if entry.name.endswith(SUFFIX)]
    except OSError:
        return False
    return any(_holds(Path(path), key) for path in paths)


def _holds(path: Path, key: bytes) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        if not _live(fd):
            return False
        data = _read_all(fd)
    except OSError:
        return False
    finally:
        os.close(fd)
    if key not in data:
        return False
    pid = _pid_of(path)
    for offset in range(0, len(data) - SLOT + 1, SLOT):
        slot = _parse(data, offset, pid)
        if slot is not None and slot.key == key:
            return True
    return False


def _live(fd: int) -> bool:
    """Whether the journal's process still holds it (its exclusive `flock`)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False
