"""Import: queues from a Go program's kv file into the queue table."""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter.conf import conf
from deadletter.models import QueuedMessage
from deadletter.store import sql
from deadletter.transfer.kvcheck import (
    KvFileError,
    watch_queries,
)
from deadletter.transfer.kvfile.rows import (
    QueueCounts,
    Report,
    Row,
    Sink,
    destination_rows,
    kv_first_message_ns,
    kv_queue_prefixes,
    kv_rows,
    label,
    move,
    open_kv,
    resolve_queues,
    valid_name,
)

logger = logging.getLogger("deadletter")


# --- import ------------------------------------------------------------------


class _QueueTable(Sink):
    def __init__(self, connection: BaseDatabaseWrapper) -> None:
        self.rows = QueuedMessage.objects.using(connection.alias)

    def existing(self, batch: Sequence[bytes]) -> dict[bytes, bytes | None]:
        held = self.rows.filter(key__in=batch).values_list("key", flat=True)
        return dict.fromkeys((bytes(k) for k in held), None)

    def insert(self, rows: Sequence[Row]) -> None:
        connection = connections[self.rows.db]
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            sql.insert_new(connection, cursor, sql.table(), ("key", "value"), rows)


def import_kv(
    path: Path | str,
    *,
    queues: Sequence[str] | None = None,
    dry_run: bool = False,
    using: str | None = None,
    on_rows: Callable[[int], None] | None = None,
) -> Report:
    """Copy the queue rows of the kv file `path` into the queue table.

    Per-message rows keep their keys and bytes; legacy aggregates are split
    (see the module docstring); de-duplication marks are ignored; corrupt
    rows are counted and skipped, and so are messages whose first failure is
    in the future (`age.first_failure_error`: the age limit would never reach
    them), which stay in the file for the operator. With `dry_run` nothing is
    written and the report says what would be.

    Written in batches of `BATCH` rows, each its own short transaction, so
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
            prefixes = resolve_queues(kv_queue_prefixes(source), queues, str(path))
            report.ignored = source.execute(
                "SELECT COUNT(*) FROM kv WHERE expires_at IS NOT NULL"
            ).fetchone()[0]
            sink = _QueueTable(connection)
            now_ns = time.time_ns()
            for prefix in prefixes:
                counts = QueueCounts(label(prefix))
                report.queues.append(counts)
                if valid_name(prefix) is None:
                    counts.corrupt += sum(1 for _ in kv_rows(source, prefix, prefix + b"\x01"))
                    counts.rows += counts.corrupt
                    logger.warning("skipping rows of an invalid queue name queue=%r", prefix)
                    continue
                rows = destination_rows(
                    kv_rows(source, prefix, prefix + b"\x01"),
                    counts,
                    lambda name: kv_first_message_ns(source, name),
                    now_ns,
                    skip_future=True,
                )
                move(rows, sink, counts, dry_run, on_rows)
                logger.info(
                    "imported queue=%s path=%s dry_run=%s written=%s present=%s corrupt=%s "
                    "future=%s",
                    counts.queue,
                    path,
                    dry_run,
                    counts.written,
                    counts.present,
                    counts.corrupt,
                    counts.future,
                )
    except sqlite3.DatabaseError as exc:
        raise KvFileError(f"{path}: cannot read: {exc}") from exc
    finally:
        source.close()
    return report
