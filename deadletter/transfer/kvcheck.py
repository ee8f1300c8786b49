"""Checks on a kv file before the kv import or export touches it, and a watchdog
on the queries run against it.

A kv file comes from outside: it may be hostile (a `kv` view over an endless
query, a virtual table), another application's database, or this app's own
database under another name. Each case is one `KvFileError` with one line for
the user, raised before anything is written.
"""

from __future__ import annotations

import contextlib
import math
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

from django.db import connections

from deadletter.exceptions import DeadletterError

__all__ = [
    "KV_COLUMNS",
    "MAX_QUERY_SECONDS",
    "KvFileError",
    "check_kv_table",
    "check_only_kv",
    "check_not_app_database",
    "check_sqlite_file",
    "read_only_uri",
    "watch_queries",
]

KV_COLUMNS = ("key", "value", "expires_at")
_SQLITE_MAGIC = b"SQLite format 3\x00"
_WAL_VERSIONS = slice(18, 20)  # the header's write and read versions: 2 and 2 in WAL mode
# What the Go program's file holds besides its table: its index, the primary
# key's automatic index, and SQLite's own tables (sqlite_stat1 after ANALYZE).
_GO_OBJECTS = {("table", "kv"), ("index", "idx_expires_at"), ("index", "sqlite_autoindex_kv_1")}
# One statement against a kv file reads a page of keys; none needs seconds.
MAX_QUERY_SECONDS = 10.0
_PROGRESS_STEPS = 10_000  # SQLite VM steps between two looks at the clock


class KvFileError(DeadletterError):
    """A kv file that cannot be used as asked; the message is one line for the user."""


def check_sqlite_file(path: Path) -> None:
    """A `KvFileError` unless `path` is a regular file starting with SQLite's header.

    Only for a file `check_not_app_database` let through: reading the project's own
    database here would close a descriptor of it, and closing any descriptor of a
    file drops every POSIX lock the process holds on it, SQLite's own included."""
    if not path.exists():
        raise KvFileError(f"{path}: no such file")
    if path.is_dir():
        raise KvFileError(f"{path}: is a directory, not an SQLite file")
    if not path.is_file():
        raise KvFileError(f"{path}: not a regular file")
    try:
        with path.open("rb") as handle:
            magic = handle.read(len(_SQLITE_MAGIC))
    except OSError as exc:
        raise KvFileError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if magic != _SQLITE_MAGIC:
        raise KvFileError(f"{path}: not an SQLite database")


def read_only_uri(path: Path) -> str:
    """The SQLite URI that reads the kv file `path` without writing beside it.

    A reader of a WAL database needs its `-shm` and `-wal` files, and creates
    them when they are missing (and cannot, on a read-only mount). So: a file
    not in WAL mode is read as it is (`mode=ro`); one whose `-wal` and `-shm`
    are there (a live Go program, or one that died) is read through them, every
    committed row included; one without a `-wal` holding anything was closed
    cleanly and is read as an unchanging file (`immutable=1`: no lock, no
    `-shm`). A `-wal` holding rows without its `-shm` is refused: reading it
    needs a `-shm` written beside it, and reading the file alone would miss them.
    """
    real = path.resolve()
    uri = f"{real.as_uri()}?mode=ro"
    if not _in_wal_mode(path):
        return uri
    wal, shm = Path(f"{real}-wal"), Path(f"{real}-shm")
    if wal.exists() and shm.exists():
        return uri
    if not wal.exists() or wal.stat().st_size == 0:
        return f"{uri}&immutable=1"
    raise KvFileError(
        f"{path}: {wal.name} holds changes not yet in the file and {shm.name} is missing, "
        f"so reading them would write {shm.name} beside it; checkpoint the file where it "
        f"may be written (sqlite3 {path.name} 'PRAGMA wal_checkpoint'), then import it"
    )


def _in_wal_mode(path: Path) -> bool:
    """Whether the header says WAL (its read and write versions are 2)."""
    try:
        with path.open("rb") as handle:
            header = handle.read(_WAL_VERSIONS.stop)
    except OSError as exc:
        raise KvFileError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return header[_WAL_VERSIONS] == b"\x02\x02"


def check_kv_table(conn: sqlite3.Connection, path: Path, *, missing_ok: bool = False) -> bool:
    """Whether `conn` has the kv table; a `KvFileError` if `kv` is anything but an ordinary
    table of the Go program's shape.

    The schema is read, never queried through: a view or a virtual table named
    `kv` could run any query (an endless recursive one) or module on every
    read, and a generated column computes instead of storing.
    """
    try:
        found = conn.execute(
            "SELECT type, sql FROM sqlite_master WHERE name = 'kv' COLLATE NOCASE"
        ).fetchall()
        if not found:
            if missing_ok:
                return False
            raise KvFileError(f"{path}: no kv table (not a database of the Go program)")
        kind, statement = found[0]
        if kind != "table":
            raise KvFileError(
                f"{path}: kv is a {kind}, not a table (not a database of the Go program)"
            )
        if (statement or "").lstrip().upper().startswith("CREATE VIRTUAL"):
            raise KvFileError(
                f"{path}: kv is a virtual table, not a table (not a database of the Go program)"
            )
        columns = conn.execute("PRAGMA table_xinfo(kv)").fetchall()
    except sqlite3.DatabaseError as exc:
        raise KvFileError(f"{path}: not a readable SQLite database: {exc}") from exc
    names = tuple(row[1] for row in columns)
    if names != KV_COLUMNS:
        raise KvFileError(
            f"{path}: table kv has columns ({', '.join(names)}); expected ({', '.join(KV_COLUMNS)})"
        )
    computed = [row[1] for row in columns if row[6]]  # `hidden`: 2 and 3 are generated
    if computed:
        raise KvFileError(f"{path}: table kv computes column {', '.join(computed)} (generated)")
    return True


def check_only_kv(conn: sqlite3.Connection, path: Path) -> None:
    """A `KvFileError` when the file holds anything besides the Go program's table and index:
    it is some other application's database, and the export would add a table to it."""
    try:
        objects = conn.execute("SELECT type, name FROM sqlite_master").fetchall()
    except sqlite3.DatabaseError as exc:
        raise KvFileError(f"{path}: not a readable SQLite database: {exc}") from exc
    foreign = sorted(
        name
        for kind, name in objects
        if (kind, name) not in _GO_OBJECTS and not name.startswith("sqlite_")
    )
    if foreign:
        shown = ", ".join(foreign[:5]) + (", …" if len(foreign) > 5 else "")
        raise KvFileError(
            f"{path}: holds {len(foreign)} table(s), index(es), view(s) or trigger(s) of "
            f"another application ({shown}); not written (--force writes into it anyway)"
        )


def check_not_app_database(path: Path) -> None:
    """A `KvFileError` when `path` is the file of one of the project's SQLite databases,
    however it is named: the same device and inode, through symlinks and relative paths.
    By `stat` alone, before anything opens `path` (`check_sqlite_file`)."""
    try:
        target = path.stat()
    except OSError:
        return  # not there yet: a new file is no database's
    for alias in connections:
        settings = connections[alias].settings_dict
        name = str(settings.get("NAME") or "")
        if not settings.get("ENGINE", "").endswith("sqlite3") or not name:
            continue
        if name == ":memory:" or "mode=memory" in name:
            continue
        try:
            database = os.stat(name.removeprefix("file:").partition("?")[0])
        except OSError:
            continue
        if (database.st_dev, database.st_ino) == (target.st_dev, target.st_ino):
            raise KvFileError(
                f"{path}: is this project's own database (DATABASES[{alias!r}]); "
                "a kv file is the Go program's, never the queue's database"
            )


@contextlib.contextmanager
def watch_queries(
    conn: sqlite3.Connection, path: Path, seconds: float = MAX_QUERY_SECONDS
) -> Iterator[None]:
    """Stop any statement on `conn` that runs longer than `seconds` with a `KvFileError`.

    SQLite's progress handler looks at the clock every few thousand VM steps;
    the trace callback restarts the clock as each statement starts, so a long
    import of many short statements is never stopped, a single runaway one is.
    """
    deadline = math.inf
    tripped = False

    def started(_statement: str) -> None:
        nonlocal deadline
        deadline = time.monotonic() + seconds

    def progress() -> int:
        nonlocal tripped
        if time.monotonic() > deadline:
            tripped = True
            return 1
        return 0

    conn.set_trace_callback(started)
    conn.set_progress_handler(progress, _PROGRESS_STEPS)
    try:
        yield
    except sqlite3.OperationalError as exc:
        if tripped:
            raise KvFileError(
                f"{path}: a query on the file ran longer than {seconds:g} s and was stopped "
                "(not a database of the Go program?)"
            ) from exc
        raise
    finally:
        conn.set_progress_handler(None, 0)
        conn.set_trace_callback(None)
