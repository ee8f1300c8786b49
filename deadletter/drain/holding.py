"""Whether a live process's handler holds a message now, read from the handler
journals (`inflight`): what an edit asks on SQLite, where a drain holds no row lock
while its handler runs, so that an edit is refused there as the servers' row locks
refuse it.

A journal is live while its process holds its `flock`; a dead process's journal
waits for the next drain's `recover` and holds nothing. Reading a live journal
takes no lock and writes nothing: a slot being written as it is read fails its
CRC and is skipped, and the settlement's compare-and-write (`settlements`) keeps
an edit that comes through such a gap.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path

from deadletter.drain.inflight import SLOT, SUFFIX, folder_of
from deadletter.drain.inflight import _parse as parse_slot
from deadletter.drain.inflight import _pid_of as pid_of
from deadletter.drain.inflight import _read_all as read_all
from deadletter.store import sql

__all__ = ["in_hand"]

logger = logging.getLogger("deadletter")


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
        data = read_all(fd)
    except OSError:
        return False
    finally:
        os.close(fd)
    if key not in data:
        return False
    pid = pid_of(path)
    for offset in range(0, len(data) - SLOT + 1, SLOT):
        slot = parse_slot(data, offset, pid)
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
