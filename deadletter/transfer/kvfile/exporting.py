"""Export: queues from the queue table into a Go program's kv file."""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter.conf import conf
from deadletter.models import QueuedMessage
from deadletter.store import scans, sql
from deadletter.transfer.kvcheck import (
    KvFileError,
    check_kv_table,
    check_not_app_database,
    check_only_kv,
    check_sqlite_file,
    watch_queries,
)
from deadletter.transfer.kvfile.rows import (
    BATCH,
    KV_SCHEMA,
    QueueCounts,
    Report,
    Row,
    Sink,
    as_bytes,
    destination_rows,
    kv_first_message_ns,
    label,
    move,
    resolve_queues,
    time_ns_of,
    valid_name,
)
from deadletter.wire import keys

logger = logging.getLogger("deadletter")


# --- export ------------------------------------------------------------------


class _KvTable(Sink):
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def existing(self, batch: Sequence[bytes]) -> dict[bytes, bytes | None]:
        """Each key the file holds, with its value; None for a de-duplication mark
        under that key, which is never compared nor overwritten."""
        marks = ", ".join(["?"] * len(batch))
        sql = f"SELECT key, value, expires_at FROM kv WHERE key IN ({marks})"
        return {
            as_bytes(key): (as_bytes(value) if expires_at is None else None)
            for key, value, expires_at in self.conn.execute(sql, list(batch))
        }

    def insert(self, rows: Sequence[Row]) -> None:
        self.conn.executemany(
            "INSERT OR IGNORE INTO kv (key, value, expires_at) VALUES (?, ?, NULL)", rows
        )

    def replace(self, rows: Sequence[Row]) -> None:
        self.conn.executemany(
            "UPDATE kv SET value = ? WHERE key = ? AND expires_at IS NULL",
            [(value, key) for key, value in rows],
        )


def _table_first_message_ns(
    connection: BaseDatabaseWrapper, table: str, prefix: bytes
) -> int | None:
    with connection.cursor() as cursor:
        cursor.execute(
            sql.statement(
                connection,
                "SELECT {key} FROM {table} WHERE {key} > %s AND {key} < %s ORDER BY {key} LIMIT 1",
                table=table,
            ),
            (prefix, prefix + b"\x01"),
        )
        row = cursor.fetchone()
    return time_ns_of(bytes(row[0])) if row else None


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
        check_not_app_database(path)
        check_sqlite_file(path)
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
    (`destination_rows`), so the messages an earlier import brought here are
    found present by the export that follows, not written again.
    """
    found = conn.execute(
        "SELECT value FROM kv WHERE key = ? AND expires_at IS NULL", (prefix,)
    ).fetchone()
    if found is None:
        return 0
    counts = QueueCounts(label(prefix))
    rows = destination_rows(
        iter([(prefix, as_bytes(found[0]))]),
        counts,
        lambda name: kv_first_message_ns(conn, name),
        now_ns,
    )
    sink = _KvTable(conn)
    while batch := list(itertools.islice(rows, BATCH)):
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
    on_rows: Callable[[int], None] | None = None,
) -> Report:
    """Write the queues (all, or those named) into the kv file `path` for the Go program.

    Creates the file and the Go program's table and index when missing.
    Every message leaves as a per-message row with `expires_at` NULL, under
    its own key and bytes. A row the file holds under the same key with other
    bytes (an edit made here, a drain's write-back, a row the Go program
    stamped) is replaced by this table's, counted `replaced`; one with the
    same bytes is left alone, counted `present`, so exporting twice writes
    nothing twice. A legacy aggregate the file holds
    for an exported queue is first split into per-message rows there and
    removed, in the same transaction, so the Go program never reads a message
    twice. Refused (`KvFileError`, nothing written): this project's own
    database, and, unless `force`, a file holding tables of another
    application.
    """
    path = Path(path)
    connection = connections[using or conf.DATABASE]
    table = QueuedMessage._meta.db_table
    available = [keys.prefix_of(head) for head in scans.queue_heads(connection, table)]
    prefixes = resolve_queues(available, queues, "the queue table")
    report = Report("export", path)
    now_ns = time.time_ns()
    with _open_for_export(path, force=force) as conn:
        report.ignored = conn.execute(
            "SELECT COUNT(*) FROM kv WHERE expires_at IS NOT NULL"
        ).fetchone()[0]
        sink = _KvTable(conn)
        for prefix in prefixes:
            counts = QueueCounts(label(prefix))
            report.queues.append(counts)
            if valid_name(prefix) is None:
                counts.corrupt += sum(
                    1 for _ in sql.iter_range(connection, table, prefix, prefix + b"\x01")
                )
                counts.rows += counts.corrupt
                logger.warning("skipping rows of an invalid queue name queue=%r", prefix)
                continue
            folded = _fold_file_aggregate(conn, path, prefix, now_ns)
            if folded:
                report.folded[counts.queue] = folded
            rows = destination_rows(
                sql.iter_range(connection, table, prefix, prefix + b"\x01"),
                counts,
                lambda name: _table_first_message_ns(connection, table, name),
                now_ns,
            )
            move(rows, sink, counts, dry_run=False, on_rows=on_rows)
            logger.info(
                "exported queue=%s path=%s written=%s replaced=%s present=%s corrupt=%s",
                counts.queue,
                path,
                counts.written,
                counts.replaced,
                counts.present,
                counts.corrupt,
            )
    return report
