"""The kv file's rows: opening and reading a kv file, turning its rows into
the queue's (and back), moving rows a batch at a time, and the report."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from deadletter.queue import age, legacy
from deadletter.store import sql
from deadletter.transfer.kvcheck import (
    KvFileError,
    check_kv_table,
    check_not_app_database,
    check_sqlite_file,
    read_only_uri,
    watch_queries,
)
from deadletter.wire import codec, keys
from deadletter.wire.messages import Message

logger = logging.getLogger("deadletter")

# The Go program's own schema, statement for statement.
KV_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS kv (\n\tkey BLOB PRIMARY KEY,\n\tvalue BLOB,\n"
    "\texpires_at INTEGER\n);",
    "CREATE INDEX IF NOT EXISTS idx_expires_at ON kv(expires_at);",
)
BATCH = 500  # rows per existence check / insert; well under SQLite's bound-variable limit

Row = tuple[bytes, bytes]


@dataclasses.dataclass
class QueueCounts:
    """What one queue's move found; `messages == written + replaced + present + future`
    always holds."""

    queue: str
    rows: int = 0  # queue rows read from the source
    messages: int = 0  # messages in the rows that decoded
    written: int = 0  # messages written under a key the destination lacked (or would be)
    replaced: int = 0  # export: messages written over a row of the same key and another value
    present: int = 0  # messages whose row the destination holds already (export: same bytes)
    corrupt: int = 0  # rows that did not decode: skipped, never moved
    future: int = 0  # import: messages first failed in the future (`age`): skipped, left there

    def add(self, other: QueueCounts) -> None:
        for field in ("rows", "messages", "written", "replaced", "present", "corrupt", "future"):
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
    """Open a kv file read-only (`mode=ro`: SQLite itself refuses any write), writing
    nothing beside it (`kvcheck.read_only_uri`), and check its shape.

    `kv` must be an ordinary table (never a view or a virtual table: see
    `kvcheck.check_kv_table`), and `trusted_schema` is off, so nothing in the
    file's schema runs functions of this process. The connection is in
    autocommit; callers wanting one snapshot open a read transaction
    themselves, and wrap their reads in `kvcheck.watch_queries`.
    """
    path = Path(path)
    check_not_app_database(path)
    check_sqlite_file(path)
    try:
        conn = sqlite3.connect(read_only_uri(path), uri=True, isolation_level=None)
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


def count_kv_rows(path: Path | str) -> int:
    """How many queue rows (not de-duplication marks) the kv file holds: an
    import's progress bar total, read under the same checks as the import."""
    conn = open_kv(path)
    try:
        with watch_queries(conn, Path(path)):
            query = "SELECT COUNT(*) FROM kv WHERE expires_at IS NULL"
            return int(conn.execute(query).fetchone()[0])
    except sqlite3.DatabaseError as exc:
        raise KvFileError(f"{path}: cannot read: {exc}") from exc
    finally:
        conn.close()


def kv_rows(conn: sqlite3.Connection, low: bytes, high: bytes, page: int = 100) -> Iterator[Row]:
    """Queue rows (not de-duplication marks) in `[low, high)`, in key order.

    Read in pages (`sql.KeyPages`), each statement finished before its rows
    are used: a statement left stepping would keep SQLite's own copy of a big
    aggregate alive beside Python's. `expires_at` is filtered here, not in
    SQL: a WHERE on the column stored after a big blob makes SQLite hold more
    copies of the blob.
    """

    def read(inclusive: bool, after: bytes, high: bytes) -> list[tuple[Any, ...]]:
        cursor = conn.execute(
            f"SELECT key, value, expires_at FROM kv WHERE key {'>=' if inclusive else '>'} ? "
            f"AND key < ? ORDER BY key LIMIT {int(page)}",
            (after, high),
        )
        try:
            return [(as_bytes(k), v, e) for k, v, e in cursor.fetchall()]
        finally:
            cursor.close()

    for page_rows in sql.KeyPages(read, low, high, page):
        for key, value, expires_at in page_rows:
            if expires_at is None:
                yield key, as_bytes(value)


def as_bytes(value: bytes | str | None) -> bytes:
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


def kv_queue_prefixes(conn: sqlite3.Connection) -> list[bytes]:
    """The queue names (raw bytes) a kv file holds queue rows of, in key order.

    A loose index scan, as `store.scans.queue_heads`: one lookup per queue,
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
        prefix = keys.prefix_of(as_bytes(row[0]))
        prefixes.append(prefix)
        after = prefix + b"\x01"


def kv_queue_names(conn: sqlite3.Connection) -> list[str]:
    """The names of the queues a kv file holds rows of, in key order."""
    return [label(prefix) for prefix in kv_queue_prefixes(conn)]


def label(prefix: bytes) -> str:
    return prefix.decode("utf-8", errors="replace")


def kv_first_message_ns(conn: sqlite3.Connection, prefix: bytes) -> int | None:
    row = conn.execute(
        "SELECT key FROM kv WHERE key > ? AND key < ? AND expires_at IS NULL ORDER BY key LIMIT 1",
        (prefix, prefix + b"\x01"),
    ).fetchone()
    return time_ns_of(row[0]) if row else None


def time_ns_of(key: bytes | str) -> int | None:
    try:
        return keys.parse_key(as_bytes(key)).time_ns
    except ValueError:
        return None


# --- turning source rows into destination rows ---------------------------


def _legacy_anchor(
    prefix: bytes, value: bytes, first_message_ns: int | None, future_after: int | None
) -> tuple[int, int, dict[int, str]]:
    """(message count, top_ns, future) for splitting an aggregate from a source file,
    from that file alone; `future` maps the index of each message whose first
    failure is in the future at `future_after` (when given) to why.

    Its messages go just below the queue's first per-message row in the
    source, as in fetch. Without one, below the newest `queued_at` (or
    timestamp) the aggregate holds, or the last key time there is when that is
    later: a time the file fixes, not the clock, so a second import derives the
    very same keys.
    Reads the blob once, message by message; raises `codec.CodecError` for a
    corrupt blob.
    """
    count = 0
    newest: int | None = None
    future: dict[int, str] = {}
    for msg in codec.iter_decode(value):
        error = _first_future([msg], future_after)
        if error is not None:
            future[count] = error
        count += 1
        moment = msg.queued_at or msg.timestamp
        if moment is not None and (newest is None or moment.unix_ns > newest):
            newest = moment.unix_ns
    if first_message_ns is not None:
        top_ns = first_message_ns
    else:
        top_ns = count if newest is None else newest + 1
    return count, min(max(top_ns, count), _KEY_TIME_END), future


_KEY_TIME_END = 1 << 64  # key times are unsigned 64-bit nanoseconds


def destination_rows(
    rows: Iterable[Row],
    counts: QueueCounts,
    first_message_ns: Callable[[bytes], int | None],
    now_ns: int,
    *,
    skip_future: bool = False,
) -> Iterator[tuple[bytes, bytes, int]]:
    """`(key, value, messages)` to write for one queue's source rows; counts what it reads.

    A per-message row keeps its key and bytes; a legacy aggregate becomes one
    row per message; a row that does not decode is counted and skipped; an
    empty row holds nothing to move. With `skip_future` (an import) a message
    whose first failure is in the future at `now_ns` is not moved, since the
    age limit would never reach it: it is counted and logged, and the row
    holding it (its slot, in an aggregate) left where it is.
    """
    future_after = now_ns if skip_future else None
    for key, value in rows:
        counts.rows += 1
        if keys.is_legacy_key(key):
            try:
                count, top_ns, future = _legacy_anchor(
                    key, value, first_message_ns(key), future_after
                )
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
            for index, (new_key, new_value) in enumerate(split):
                if index in future:
                    _future(counts, key, 1, f"message {index}: {future[index]}")
                else:
                    yield new_key, new_value, 1
            continue
        try:
            keys.parse_key(key)
            msgs = codec.decode(value)
        except (codec.CodecError, ValueError) as exc:
            _corrupt(counts, key, exc)
            continue
        counts.messages += len(msgs)
        error = _first_future(msgs, future_after)
        if error is not None:
            _future(counts, key, len(msgs), error)
        elif msgs:
            yield key, value, len(msgs)


def _first_future(msgs: list[Message], future_after: int | None) -> str | None:
    """Why the first of `msgs` whose first failure is after `future_after` is refused."""
    if future_after is None:
        return None
    errors = (age.first_failure_error(m.queued_at, future_after) for m in msgs)
    return next((e for e in errors if e is not None), None)


def _corrupt(counts: QueueCounts, key: bytes, exc: Exception) -> None:
    counts.corrupt += 1
    logger.warning("skipping corrupt row queue=%s key=%s error=%s", counts.queue, key.hex(), exc)


def _future(counts: QueueCounts, key: bytes, messages: int, why: str) -> None:
    counts.future += messages
    logger.warning(
        "skipping a message first failed in the future queue=%s key=%s error=%s",
        counts.queue,
        key.hex(),
        why,
    )


def valid_name(name: bytes) -> str | None:
    try:
        text = name.decode("utf-8")
        keys.encode_queue_name(text)
    except (UnicodeDecodeError, ValueError):
        return None
    return text


class Sink:
    """Where rows go: which keys it holds already, and a way to add rows.

    `existing` maps each key held to its value, or to None where the value is
    not to be compared (the import leaves a row the queue table holds as it
    is: a drain may have moved on from it). A sink that answers values gets
    `replace` for the rows whose value differs.
    """

    def existing(self, batch: Sequence[bytes]) -> dict[bytes, bytes | None]:
        raise NotImplementedError

    def insert(self, rows: Sequence[Row]) -> None:
        raise NotImplementedError

    def replace(self, rows: Sequence[Row]) -> None:
        raise NotImplementedError


def move(
    rows: Iterator[tuple[bytes, bytes, int]],
    sink: Sink,
    counts: QueueCounts,
    dry_run: bool,
    on_rows: Callable[[int], None] | None = None,
) -> None:
    """Write the rows the sink lacks, and those it holds with another value when it
    answers values (`Sink.existing`), in batches; a row it holds with the same
    bytes (or uncompared) counts as present, untouched. `on_rows(n)` hears of
    every batch moved (a command's progress bar)."""
    while batch := list(itertools.islice(rows, BATCH)):
        held = sink.existing([key for key, _, _ in batch])
        new: list[Row] = []
        changed: list[Row] = []
        for key, value, messages in batch:
            if key not in held:
                counts.written += messages
                new.append((key, value))
            elif held[key] is None or held[key] == value:
                counts.present += messages
            else:
                counts.replaced += messages
                changed.append((key, value))
        if new and not dry_run:
            sink.insert(new)
        if changed and not dry_run:
            sink.replace(changed)
        if on_rows is not None:
            on_rows(len(batch))


def resolve_queues(
    available: Sequence[bytes], wanted: Sequence[str] | None, where: str
) -> list[bytes]:
    """The queue prefixes to move: all of them, or those named, each of which must be there."""
    if not wanted:
        return list(available)
    missing = [name for name in wanted if name.encode("utf-8") not in available]
    if missing:
        raise KvFileError(f"{where} has no queue named {', '.join(map(repr, missing))}")
    return list(dict.fromkeys(name.encode("utf-8") for name in wanted))


# --- the report ----------------------------------------------------------------


def format_report(report: Report) -> str:
    """The report as the commands print it: one line of summary, then a table per queue
    (with a `future` column when an import left such messages in the file; an
    export's table tells new rows, rows replaced and rows already identical apart)."""
    total = report.total
    verb = report.action
    direction = "from" if report.action == "import" else "to"
    if report.dry_run:
        head = f"Would {verb} {total.written} messages {direction} {report.path} (dry run)"
        written = f"to {verb}"
    else:
        folded = sum(report.folded.values())
        done = total.written + total.replaced + folded
        head = f"{verb.capitalize()}ed {done} messages {direction} {report.path}"
        if folded:
            head += f" ({folded} of them split out of the file's own legacy rows)"
        written = f"{verb}ed"
    if total.replaced:
        head += (
            f"; {total.replaced} of them replaced the file's row under the same key, "
            "which held other bytes"
        )
    if report.action == "export" and total.present:
        head += f"; {total.present} already in the file with the same bytes, left alone"
    if report.ignored:
        head += f"; {report.ignored} de-duplication rows left alone"
    if total.future:
        head += (
            f"; {total.future} messages whose first failure is in the future were left in "
            "the file (the Go program's clock?)"
        )
    columns: tuple[str, ...]
    if report.action == "export":
        columns = ("queue", "rows", "messages", "new", "replaced", "identical", "corrupt")
    else:
        columns = ("queue", "rows", "messages", written, "present", "corrupt")
        if total.future:
            columns += ("future",)
    lines = [*report.queues, total]
    table = [columns] + [
        (
            (c.queue, str(c.rows), str(c.messages), str(c.written), str(c.replaced))
            if report.action == "export"
            else (c.queue, str(c.rows), str(c.messages), str(c.written))
        )
        + (str(c.present), str(c.corrupt), str(c.future))
        for c in lines
    ]
    table = [row[: len(columns)] for row in table]
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
