"""Moving queues in and out of the Go program's database: an SQLite file with one table,
`kv(key BLOB PRIMARY KEY, value BLOB, expires_at INTEGER)`.

Its queue rows use this app's key layout and CBOR values, so a per-message
row moves across as it is, key and bytes unchanged. Rows with `expires_at`
set are the Go program's de-duplication marks, not queue rows: they are
never read or written here. A legacy aggregate row is split on the way in
(and on the way out, should one still be here) by the same rule as fetch
and the data migration (`legacy.legacy_message_rows`), under keys derived
from the file alone, so importing a file twice, or a file exported from
here, writes nothing twice: a row whose key the destination already holds
is counted as present and left alone.

The source file of an import is opened read-only and read in one snapshot.
An export writes a new file under a temporary name and renames it into place
when complete, or writes an existing kv file in one transaction, so a
failure leaves nothing behind. Bad input is a `KvFileError` with one line
for the user, raised before anything is written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import os
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Literal

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter import codec, keys, legacy, sql
from deadletter.conf import conf
from deadletter.kvcheck import (
    KvFileError,
    check_kv_table,
    check_not_app_database,
    check_only_kv,
    check_sqlite_file,
    watch_queries,
)
from deadletter.models import QueuedMessage

__all__ = [
    "KV_SCHEMA",
    "KvFileError",
    "QueueCounts",
    "Report",
    "export_kv",
    "format_report",
    "import_kv",
    "kv_queue_names",
    "open_kv",
]

logger = logging.getLogger("deadletter")

# The Go program's own schema, statement for statement.
KV_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS kv (\n\tkey BLOB PRIMARY KEY,\n\tvalue BLOB,\n"
    "\texpires_at INTEGER\n);",
    "CREATE INDEX IF NOT EXISTS idx_expires_at ON kv(expires_at);",
)
_BATCH = 500  # rows per existence check / insert; well under SQLite's bound-variable limit

Row = tuple[bytes, bytes]


@dataclasses.dataclass
class QueueCounts:
    """What one queue's move found; `messages == written + present` always holds."""

    queue: str
    rows: int = 0  # queue rows read from the source
    messages: int = 0  # messages in the rows that decoded
    written: int = 0  # messages written to the destination (or that would be, in a dry run)
    present: int = 0  # messages whose row the destination already holds: left alone
    corrupt: int = 0  # rows that did not decode: skipped, never moved

    def add(self, other: QueueCounts) -> None:
        for field in ("rows", "messages", "written", "present", "corrupt"):
            setattr(self, field, getattr(self, field) + getattr(other, field))


@dataclasses.dataclass
class Report:
    """The outcome of an import or export, one `QueueCounts` per queue in key order."""

    action: Literal["import", "export"]
    path: Path
    dry_run: bool = False
    queues: list[QueueCounts] = dataclasses.field(default_factory=list)
    ignored: int = 0  # de-duplication rows left alone
    folded: dict[str, int] = dataclasses.field(default_factory=dict)  # export: file aggregates

    @property
    def total(self) -> QueueCounts:
        total = QueueCounts("total")
        for counts in self.queues:
            total.add(counts)
        return total


# --- opening and reading a kv file ------------------------------------------


def open_kv(path: Path | str) -> sqlite3.Connection:
    """Open a kv file read-only (`mode=ro`: SQLite itself refuses any write) and check its shape.

    `kv` must be an ordinary table (never a view or a virtual table: see
    `kvcheck.check_kv_table`), and `trusted_schema` is off, so nothing in the
    file's schema runs functions of this process. The connection is in
    autocommit; callers wanting one snapshot open a read transaction
    themselves, and wrap their reads in `kvcheck.watch_queries`.
    """
    path = Path(path)
    check_sqlite_file(path)
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None)
    except sqlite3.Error as exc:
        raise KvFileError(f"{path}: cannot open: {exc}") from exc
    try:
        conn.execute("PRAGMA trusted_schema = OFF")
        check_kv_table(conn, path)
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise KvFileError(f"{path}: not a readable SQLite database: {exc}") from exc
    except BaseException:
        conn.close()
        raise
    return conn


def _kv_rows(conn: sqlite3.Connection, low: bytes, high: bytes, page: int = 100) -> Iterator[Row]:
    """Queue rows (not de-duplication marks) in `[low, high)`, in key order.

    Read in pages keyed on the last key seen, each statement finished before
    its rows are used: a statement left stepping would keep SQLite's own copy
    of a big aggregate alive beside Python's. `expires_at` is filtered here,
    not in SQL: a WHERE on the column stored after a big blob makes SQLite
    hold two more copies of the blob (measured: 4x its size instead of 2x).
    """
    after, op = low, ">="
    while True:
        cursor = conn.execute(
            f"SELECT key, value, expires_at FROM kv WHERE key {op} ? AND key < ? "
            f"ORDER BY key LIMIT {int(page)}",
            (after, high),
        )
        page_rows = cursor.fetchall()
        cursor.close()
        for key, value, expires_at in page_rows:
            if expires_at is None:
                yield _as_bytes(key), _as_bytes(value)
        if len(page_rows) < page:
            return
        after, op = _as_bytes(page_rows[-1][0]), ">"


def _as_bytes(value: bytes | str | None) -> bytes:
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


def _kv_queue_prefixes(conn: sqlite3.Connection) -> list[bytes]:
    """The queue names (raw bytes) a kv file holds queue rows of, in key order.

    A loose index scan, as `legacy.iter_queue_heads`: one lookup per queue,
    no blob read.
    """
    prefixes: list[bytes] = []
    after = b""
    while True:
        row = conn.execute(
            "SELECT key FROM kv WHERE key >= ? AND expires_at IS NULL ORDER BY key LIMIT 1",
            (after,),
        ).fetchone()
        if row is None:
            return prefixes
        prefix = _as_bytes(row[0]).partition(keys.SEPARATOR)[0]
        prefixes.append(prefix)
        after = prefix + b"\x01"


def kv_queue_names(conn: sqlite3.Connection) -> list[str]:
    """The names of the queues a kv file holds rows of, in key order."""
    return [_label(prefix) for prefix in _kv_queue_prefixes(conn)]


def _label(prefix: bytes) -> str:
    return prefix.decode("utf-8", errors="replace")


def _kv_first_message_ns(conn: sqlite3.Connection, prefix: bytes) -> int | None:
    row = conn.execute(
        "SELECT key FROM kv WHERE key > ? AND key < ? AND expires_at IS NULL ORDER BY key LIMIT 1",
        (prefix, prefix + b"\x01"),
    ).fetchone()
    return _time_ns_of(row[0]) if row else None


def _time_ns_of(key: bytes | str) -> int | None:
    try:
        return keys.parse_key(_as_bytes(key)).time_ns
    except ValueError:
        return None


# --- turning source rows into destination rows ---------------------------


def _legacy_anchor(prefix: bytes, value: bytes, first_message_ns: int | None) -> tuple[int, int]:
    """(message count, top_ns) for splitting an aggregate from a source file, from that file alone.

    Its messages go just below the queue's first per-message row in the
    source, as in fetch. Without one, below the newest `queued_at` (or
    timestamp) the aggregate holds: a time the file fixes, not the clock, so
    a second import derives the very same keys. Reads the blob once,
    message by message; raises `codec.CodecError` for a corrupt blob.
    """
    count = 0
    newest: int | None = None
    for msg in codec.iter_decode(value):
        count += 1
        moment = msg.queued_at or msg.timestamp
        if moment is not None and (newest is None or moment.unix_ns > newest):
            newest = moment.unix_ns
    if first_message_ns is not None:
        top_ns = first_message_ns
    else:
        top_ns = count if newest is None else newest + 1
    return count, max(top_ns, count)


def _destination_rows(
    rows: Iterable[Row],
    counts: QueueCounts,
    first_message_ns: Callable[[bytes], int | None],
    now_ns: int,
) -> Iterator[tuple[bytes, bytes, int]]:
    """`(key, value, messages)` to write for one queue's source rows; counts what it reads.

    A per-message row keeps its key and bytes; a legacy aggregate becomes one
    row per message; a row that does not decode is counted and skipped; an
    empty row holds nothing to move.
    """
    for key, value in rows:
        counts.rows += 1
        if keys.is_legacy_key(key):
            try:
                count, top_ns = _legacy_anchor(key, value, first_message_ns(key))
            except codec.CodecError as exc:
                _corrupt(counts, key, exc)
                continue
            counts.messages += count
            # Decoded a second time while written, one message at a time.
            split = legacy.legacy_message_rows(
                key,
                value,
                count=count,
                top_ns=top_ns,
                seq=legacy.split_seq(key, value),
                now_ns=now_ns,
            )
            for new_key, new_value in split:
                yield new_key, new_value, 1
            continue
        try:
            keys.parse_key(key)
            messages = len(codec.decode(value))
        except (codec.CodecError, ValueError) as exc:
            _corrupt(counts, key, exc)
            continue
        counts.messages += messages
        if messages:
            yield key, value, messages


def _corrupt(counts: QueueCounts, key: bytes, exc: Exception) -> None:
    counts.corrupt += 1
    logger.warning("skipping corrupt row queue=%s key=%s error=%s", counts.queue, key.hex(), exc)


def _valid_name(name: bytes) -> str | None:
    try:
        text = name.decode("utf-8")
        keys.encode_queue_name(text)
    except (UnicodeDecodeError, ValueError):
        return None
    return text


class _Sink:
    """Where rows go: which keys it holds already, and a way to add rows."""

    def existing(self, batch: Sequence[bytes]) -> set[bytes]:
        raise NotImplementedError

    def insert(self, rows: Sequence[Row]) -> None:
        raise NotImplementedError


def _move(
    rows: Iterator[tuple[bytes, bytes, int]], sink: _Sink, counts: QueueCounts, dry_run: bool
) -> None:
    """Write the rows the sink lacks, in batches; a row it holds counts as present, untouched."""
    while batch := list(itertools.islice(rows, _BATCH)):
        held = sink.existing([key for key, _, _ in batch])
        new: list[Row] = []
        for key, value, messages in batch:
            if key in held:
                counts.present += messages
            else:
                counts.written += messages
                new.append((key, value))
        if new and not dry_run:
            sink.insert(new)


# --- import ------------------------------------------------------------------


class _QueueTable(_Sink):
    def __init__(self, connection: BaseDatabaseWrapper) -> None:
        self.connection = connection
        self.table = connection.ops.quote_name(QueuedMessage._meta.db_table)

    def existing(self, batch: Sequence[bytes]) -> set[bytes]:
        marks = ", ".join(["%s"] * len(batch))
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT key FROM {self.table} WHERE key IN ({marks})",
                list(batch),
            )
            return {bytes(row[0]) for row in cursor.fetchall()}

    def insert(self, rows: Sequence[Row]) -> None:
        # One short transaction per batch: the write lock is held for the INSERT alone.
        with transaction.atomic(using=self.connection.alias), self.connection.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO {self.table} (key, value) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                rows,
            )


def _resolve_queues(
    available: Sequence[bytes], wanted: Sequence[str] | None, where: str
) -> list[bytes]:
    """The queue prefixes to move: all of them, or those named, each of which must be there."""
    if not wanted:
        return list(available)
    missing = [name for name in wanted if name.encode("utf-8") not in available]
    if missing:
        raise KvFileError(f"{where} has no queue named {', '.join(map(repr, missing))}")
    return list(dict.fromkeys(name.encode("utf-8") for name in wanted))


def import_kv(
    path: Path | str,
    *,
    queues: Sequence[str] | None = None,
    dry_run: bool = False,
    using: str | None = None,
) -> Report:
    """Copy the queue rows of the kv file `path` into the queue table.

    Per-message rows keep their keys and bytes; legacy aggregates are split
    (see the module docstring); de-duplication marks are ignored; corrupt
    rows are counted and skipped. With `dry_run` nothing is written and the
    report says what would be.

    Written in batches of `_BATCH` rows, each its own short transaction, so
    parking (`store_failed_msgs`) never waits long for SQLite's write lock;
    the source is decoded outside them. Every key written derives from the
    file alone and goes in with ON CONFLICT DO NOTHING, so an import that
    stopped half way (a crash, an error) is finished by running it again,
    with nothing twice. Checks on the file and the first reads of it
    (its queues, its de-duplication marks) come before the first write, and
    any one query on it that runs past `kvcheck.MAX_QUERY_SECONDS` is stopped
    with a `KvFileError`.
    """
    path = Path(path)
    connection = connections[using or conf.DATABASE]
    source = open_kv(path)
    report = Report("import", path, dry_run=dry_run)
    try:
        with watch_queries(source, path):
            source.execute("BEGIN")  # one snapshot, even if the Go program writes meanwhile
            prefixes = _resolve_queues(_kv_queue_prefixes(source), queues, str(path))
            report.ignored = source.execute(
                "SELECT COUNT(*) FROM kv WHERE expires_at IS NOT NULL"
            ).fetchone()[0]
            sink = _QueueTable(connection)
            now_ns = time.time_ns()
            for prefix in prefixes:
                counts = QueueCounts(_label(prefix))
                report.queues.append(counts)
                if _valid_name(prefix) is None:
                    counts.corrupt += sum(1 for _ in _kv_rows(source, prefix, prefix + b"\x01"))
                    counts.rows += counts.corrupt
                    logger.warning("skipping rows of an invalid queue name queue=%r", prefix)
                    continue
                rows = _destination_rows(
                    _kv_rows(source, prefix, prefix + b"\x01"),
                    counts,
                    lambda name: _kv_first_message_ns(source, name),
                    now_ns,
                )
                _move(rows, sink, counts, dry_run)
                logger.info(
                    "imported queue=%s path=%s dry_run=%s written=%s present=%s corrupt=%s",
                    counts.queue,
                    path,
                    dry_run,
                    counts.written,
                    counts.present,
                    counts.corrupt,
                )
    except sqlite3.DatabaseError as exc:
        raise KvFileError(f"{path}: cannot read: {exc}") from exc
    finally:
        source.close()
    return report


# --- export ------------------------------------------------------------------


class _KvTable(_Sink):
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def existing(self, batch: Sequence[bytes]) -> set[bytes]:
        marks = ", ".join(["?"] * len(batch))
        sql = f"SELECT key FROM kv WHERE key IN ({marks})"
        return {_as_bytes(row[0]) for row in self.conn.execute(sql, list(batch))}

    def insert(self, rows: Sequence[Row]) -> None:
        self.conn.executemany(
            "INSERT OR IGNORE INTO kv (key, value, expires_at) VALUES (?, ?, NULL)", rows
        )


def _table_first_message_ns(
    connection: BaseDatabaseWrapper, table: str, prefix: bytes
) -> int | None:
    quoted = connection.ops.quote_name(table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT key FROM {quoted} WHERE key > %s AND key < %s ORDER BY key LIMIT 1",
            (prefix, prefix + b"\x01"),
        )
        row = cursor.fetchone()
    return _time_ns_of(bytes(row[0])) if row else None


@contextlib.contextmanager
def _open_for_export(path: Path, *, force: bool = False) -> Iterator[sqlite3.Connection]:
    """A connection to write the kv file `path` in one transaction; nothing is left on failure.

    Never this project's own database, however it is named. An existing file
    must be SQLite, its kv table (if it has one) the Go program's shape, and,
    unless `force`, it must hold nothing else (another application's file).
    A new file is built under a temporary name beside it and renamed into
    place only once complete.
    """
    temporary: Path | None = None
    if path.exists() or path.is_symlink():
        check_sqlite_file(path)
        check_not_app_database(path)
        target = f"{path.resolve().as_uri()}?mode=rw"
    else:
        parent = path.parent
        if not parent.is_dir():
            raise KvFileError(f"{path}: cannot write: {parent} is not a directory")
        name = parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            # Exclusive, and with the mode a plain create gives (mkstemp's is 0600).
            os.close(os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
        except OSError as exc:
            raise KvFileError(f"{path}: cannot write: {exc.strerror or exc}") from exc
        temporary = name
        target = f"{temporary.resolve().as_uri()}?mode=rw"
    conn: sqlite3.Connection | None = None
    try:
        try:
            conn = sqlite3.connect(target, uri=True, isolation_level=None)
            conn.execute("PRAGMA trusted_schema = OFF")
            check_kv_table(conn, path, missing_ok=True)
            if not force:
                check_only_kv(conn, path)
            conn.execute("BEGIN IMMEDIATE")
            for statement in KV_SCHEMA:
                conn.execute(statement)
        except sqlite3.Error as exc:
            raise KvFileError(f"{path}: cannot write: {exc}") from exc
        try:
            with watch_queries(conn, path):
                yield conn
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise KvFileError(f"{path}: cannot write: {exc}") from exc
        conn.close()
        conn = None
        if temporary is not None:
            os.replace(temporary, path)
            temporary = None
    finally:
        if conn is not None:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            conn.close()
        if temporary is not None:
            for suffix in ("", "-journal", "-wal", "-shm"):
                Path(f"{temporary}{suffix}").unlink(missing_ok=True)


def _fold_file_aggregate(conn: sqlite3.Connection, path: Path, prefix: bytes, now_ns: int) -> int:
    """Split the file's own legacy aggregate of queue `prefix` into per-message rows in the
    file and delete it, in the export's transaction; returns its message count (0: none).

    The Go program reads an aggregate and the per-message rows beside it alike,
    so exporting a queue's rows next to its aggregate would show every message
    of both twice. The rows get the keys an import of this file derives
    (`_destination_rows`), so the messages an earlier import brought here are
    found present by the export that follows, not written again.
    """
    found = conn.execute(
        "SELECT value FROM kv WHERE key = ? AND expires_at IS NULL", (prefix,)
    ).fetchone()
    if found is None:
        return 0
    counts = QueueCounts(_label(prefix))
    rows = _destination_rows(
        iter([(prefix, _as_bytes(found[0]))]),
        counts,
        lambda name: _kv_first_message_ns(conn, name),
        now_ns,
    )
    sink = _KvTable(conn)
    while batch := list(itertools.islice(rows, _BATCH)):
        sink.insert([(key, value) for key, value, _ in batch])
    if counts.corrupt:
        raise KvFileError(
            f"{path}: the legacy row of queue {counts.queue!r} does not decode; "
            "exporting that queue beside it would not be read right (export other queues "
            "with --queue, or remove that row)"
        )
    conn.execute("DELETE FROM kv WHERE key = ? AND expires_at IS NULL", (prefix,))
    logger.info(
        "folded the kv file's legacy row into per-message rows queue=%s path=%s messages=%s",
        counts.queue,
        path,
        counts.messages,
    )
    return counts.messages


def export_kv(
    path: Path | str,
    *,
    queues: Sequence[str] | None = None,
    using: str | None = None,
    force: bool = False,
) -> Report:
    """Write the queues (all, or those named) into the kv file `path` for the Go program.

    Creates the file and the Go program's table and index when missing.
    Every message leaves as a per-message row with `expires_at` NULL, under
    its own key and bytes; a row the file already holds is left alone, so
    exporting twice writes nothing twice. A legacy aggregate the file holds
    for an exported queue is first split into per-message rows there and
    removed, in the same transaction, so the Go program never reads a message
    twice. Refused (`KvFileError`, nothing written): this project's own
    database, and, unless `force`, a file holding tables of another
    application.
    """
    path = Path(path)
    connection = connections[using or conf.DATABASE]
    table = QueuedMessage._meta.db_table
    available = [
        head.partition(keys.SEPARATOR)[0] for head in legacy.iter_queue_heads(connection, table)
    ]
    prefixes = _resolve_queues(available, queues, "the queue table")
    report = Report("export", path)
    now_ns = time.time_ns()
    with _open_for_export(path, force=force) as conn:
        report.ignored = conn.execute(
            "SELECT COUNT(*) FROM kv WHERE expires_at IS NOT NULL"
        ).fetchone()[0]
        sink = _KvTable(conn)
        for prefix in prefixes:
            counts = QueueCounts(_label(prefix))
            report.queues.append(counts)
            if _valid_name(prefix) is None:
                counts.corrupt += sum(
                    1 for _ in sql.iter_range(connection, table, prefix, prefix + b"\x01")
                )
                counts.rows += counts.corrupt
                logger.warning("skipping rows of an invalid queue name queue=%r", prefix)
                continue
            folded = _fold_file_aggregate(conn, path, prefix, now_ns)
            if folded:
                report.folded[counts.queue] = folded
            rows = _destination_rows(
                sql.iter_range(connection, table, prefix, prefix + b"\x01"),
                counts,
                lambda name: _table_first_message_ns(connection, table, name),
                now_ns,
            )
            _move(rows, sink, counts, dry_run=False)
            logger.info(
                "exported queue=%s path=%s written=%s present=%s corrupt=%s",
                counts.queue,
                path,
                counts.written,
                counts.present,
                counts.corrupt,
            )
    return report


# --- the report ----------------------------------------------------------------


def format_report(report: Report) -> str:
    """The report as the commands print it: one line of summary, then a table per queue."""
    total = report.total
    verb = report.action
    direction = "from" if report.action == "import" else "to"
    if report.dry_run:
        head = f"Would {verb} {total.written} messages {direction} {report.path} (dry run)"
        written = f"to {verb}"
    else:
        head = f"{verb.capitalize()}ed {total.written} messages {direction} {report.path}"
        written = f"{verb}ed"
    if report.ignored:
        head += f"; {report.ignored} de-duplication rows left alone"
    columns = ("queue", "rows", "messages", written, "present", "corrupt")
    lines = [*report.queues, total]
    table = [columns] + [
        (c.queue, str(c.rows), str(c.messages), str(c.written), str(c.present), str(c.corrupt))
        for c in lines
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(columns))]
    out = [head]
    for row in table:
        cells = [row[0].ljust(widths[0])] + [
            cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)
        ]
        out.append("  ".join(cells).rstrip())
    for queue, messages in report.folded.items():
        out.append(
            f"The file's legacy row of queue {queue!r} ({messages} messages) "
            "was split into per-message rows there first."
        )
    return "\n".join(out)
