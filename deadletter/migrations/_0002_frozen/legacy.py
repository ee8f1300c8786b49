# Frozen for migration 0002: the split and fold code of deadletter/legacy.py as the
# migration ran it (no drop counting, signals or age limit: the migration used none).
# Never edit.
"""Legacy aggregate rows (a whole queue as one CBOR list under the bare queue
name, as older releases wrote them): split into per-message rows, and folded
back for a downgrade.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from collections.abc import Iterator
from typing import Any, TypeVar

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter.migrations._0002_frozen import keys, rows
from deadletter.migrations._0002_frozen.items import CodecError

__all__ = ["fold_all_queues", "split_legacy_rows", "split_seq"]

logger = logging.getLogger("deadletter")


class Conflict(Exception):
    """The row changed between read and write: another reader got there first."""


_SPLIT_BATCH = 1000  # rows per transaction: a few ms of SQLite's write lock

T = TypeVar("T")


def split_seq(prefix: bytes, value: bytes) -> int:
    """A seq fixed by the aggregate's bytes, so every attempt to split it derives the same keys."""
    digest = hashlib.sha256(prefix)
    digest.update(keys.SEPARATOR)
    digest.update(value)
    return int.from_bytes(digest.digest()[:8], "big")


def split_legacy_row(
    connection: BaseDatabaseWrapper,
    table: str,
    prefix: bytes,
    value: bytes,
    *,
    now_ns: int,
) -> int:
    """Split a legacy aggregate row (a whole queue under the bare name) into
    per-message rows; returns how many rows it stored.

    Its messages are older than any per-message row already in the queue, so
    they get keys just below the first such row, in list order. The work is
    committed in batches of `_SPLIT_BATCH` rows, each a short transaction, so
    a concurrent `store_failed_msgs` never waits long for SQLite's write lock;
    messages are decoded and encoded outside the transactions. The aggregate
    is deleted in a last transaction, only once all of its messages are stored.

    Restartable without duplicates: message `i` gets the key
    `(top_ns - count + i, seq ^ i)` with `seq` from the aggregate's bytes
    (`split_seq`), and a later attempt (after a crash, or by a second reader
    meanwhile) finds `top_ns` again from any row an earlier attempt stored
    (its seq gives its index), then inserts with ON CONFLICT DO NOTHING.
    Each batch first locks the aggregate row and checks it is still there, so
    nothing is written once another reader has finished the split.

    Raises `CodecError` for a corrupt blob (the rows written for it are
    removed again, in batches, and the aggregate left) and `Conflict` if
    another reader split it first.
    """
    quoted = connection.ops.quote_name(table)
    k = connection.ops.quote_name("key")
    queue = prefix.decode("utf-8", errors="replace")
    count = rows.count_messages(value)
    seq = split_seq(prefix, value)
    items = _batches(_split_items(value, count, now_ns), _SPLIT_BATCH)
    top_ns: int | None = None
    stored = 0
    reached = 0
    try:
        for batch in items:
            with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
                _claim(connection, cursor, quoted, prefix, len(value))
                if top_ns is None:
                    top_ns = _anchor(cursor, quoted, prefix, seq, count, now_ns)
                base_ns = top_ns - count
                found = [
                    (keys.make_key(prefix, base_ns + index, seq ^ index), encoded)
                    for index, encoded in batch
                ]
                if found:
                    cursor.executemany(
                        f"INSERT INTO {quoted} ({k}, value) VALUES (%s, %s) "
                        + (
                            f"ON DUPLICATE KEY UPDATE {k} = {k}"
                            if connection.vendor == "mysql"
                            else "ON CONFLICT DO NOTHING"
                        ),
                        found,
                    )
            stored += len(found)
            reached = batch[-1][0] + 1
    except CodecError:
        if top_ns is not None:
            _undo(connection, quoted, prefix, top_ns - count, seq, reached)
        raise
    # Every message is stored: the aggregate goes, in a transaction of its own.
    with (
        _freed_without_zeroing(connection),
        transaction.atomic(using=connection.alias),
        connection.cursor() as cursor,
    ):
        _claim(connection, cursor, quoted, prefix, len(value))
        cursor.execute(f"DELETE FROM {quoted} WHERE {k} = %s", (prefix,))
    logger.info("split legacy row queue=%s messages=%s stored=%s", queue, count, stored)
    return stored


def _split_items(value: bytes, count: int, now_ns: int) -> Iterator[tuple[int, bytes]]:
    """`(index, row value)` per message, stamped as queued now when it has no `QueuedAt`."""
    for index, wire in enumerate(rows.message_maps(value)):
        if index >= count:
            raise CodecError(f"legacy row holds more than the {count} messages counted")
        yield index, rows.row_value(wire, now_ns)


@contextlib.contextmanager
def _freed_without_zeroing(connection: BaseDatabaseWrapper) -> Iterator[None]:
    """On SQLite, `secure_delete = FAST` while a big aggregate is deleted.

    An SQLite built with SECURE_DELETE (Debian's is) overwrites every page it
    frees with zeros: deleting a 47 MB aggregate wrote 47 MB to the WAL under
    the write lock (about 400 ms measured, against 40 ms with FAST). FAST only
    skips the zeroing that costs extra I/O, and the aggregate's messages live
    on in their own rows, so nothing deleted is left readable that is not
    readable anyway. The connection's own setting is put back afterwards.
    """
    if connection.vendor != "sqlite":
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA secure_delete")
        previous = int(cursor.fetchone()[0])
        cursor.execute("PRAGMA secure_delete = FAST")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"PRAGMA secure_delete = {'FAST' if previous == 2 else previous}")


def _claim(
    connection: BaseDatabaseWrapper, cursor: Any, quoted: str, prefix: bytes, length: int
) -> None:
    """Take the write lock and check the aggregate is still the one read, or `Conflict`.

    On SQLite an empty DELETE takes the write lock (without it, a deferred
    transaction that read first could not write after another commit); on
    PostgreSQL the aggregate's row is locked, so two splitters take turns.
    The length, not the bytes, tells whether the row is still the one read:
    sending a big blob back to compare it costs two more copies of it.
    """
    k = connection.ops.quote_name("key")
    if connection.vendor == "sqlite":
        cursor.execute(f"DELETE FROM {quoted} WHERE 0")
        cursor.execute(
            f"SELECT 1 FROM {quoted} WHERE {k} = %s AND length(value) = %s", (prefix, length)
        )
    else:
        cursor.execute(
            f"SELECT 1 FROM {quoted} WHERE {k} = %s AND length(value) = %s FOR UPDATE",
            (prefix, length),
        )
    if cursor.fetchone() is None:
        raise Conflict


_ANCHOR_PROBE = 64


def _anchor(cursor: Any, quoted: str, prefix: bytes, seq: int, count: int, now_ns: int) -> int:
    """`top_ns` for an aggregate of `count` messages: from a row an earlier attempt stored, if
    any is among the queue's first rows; else just below the queue's first row (or now)."""
    k = cursor.db.ops.quote_name("key")
    cursor.execute(
        f"SELECT {k} FROM {quoted} WHERE {k} > %s AND {k} < %s ORDER BY {k} LIMIT {_ANCHOR_PROBE}",
        (prefix, prefix + b"\x01"),
    )
    first_ns: int | None = None
    for (raw,) in cursor.fetchall():
        try:
            parsed = keys.parse_key(bytes(raw))
        except ValueError:
            continue
        index = parsed.seq ^ seq
        if index < count and parsed.time_ns >= index:
            return parsed.time_ns - index + count  # a row of an earlier attempt
        if first_ns is None:
            first_ns = parsed.time_ns
    top_ns = now_ns if first_ns is None else min(first_ns, now_ns)
    if top_ns < count:
        raise CodecError("no room for the legacy messages before the queue's first row")
    return top_ns


def _undo(
    connection: BaseDatabaseWrapper, quoted: str, prefix: bytes, base_ns: int, seq: int, upto: int
) -> None:
    """Remove the rows a split wrote for messages `0..upto` (a corrupt aggregate), in batches."""
    k = connection.ops.quote_name("key")
    for start in range(0, upto, _SPLIT_BATCH):
        doomed = [
            (keys.make_key(prefix, base_ns + i, seq ^ i),)
            for i in range(start, min(upto, start + _SPLIT_BATCH))
        ]
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.executemany(f"DELETE FROM {quoted} WHERE {k} = %s", doomed)


def _batches(rows: Iterator[T], size: int) -> Iterator[list[T]]:
    batch: list[T] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def iter_queue_heads(connection: BaseDatabaseWrapper, table: str) -> Iterator[bytes]:
    """The lowest key of every queue in `table`: a legacy key when the queue has an aggregate.

    A loose index scan: after a queue's first key it jumps past the queue's
    whole range `[name, name 0x01)`, so finding the legacy rows of a table of
    millions of rows costs one indexed lookup per queue, not a full scan.
    """
    k = connection.ops.quote_name("key")
    query = (
        f"SELECT {k} FROM {connection.ops.quote_name(table)} WHERE {k} >= %s ORDER BY {k} LIMIT 1"
    )
    after = b""
    while True:
        with connection.cursor() as cursor:
            cursor.execute(query, (after,))
            row = cursor.fetchone()
        if row is None:
            return
        key = bytes(row[0])
        yield key
        after = key.partition(keys.SEPARATOR)[0] + b"\x01"


def split_legacy_rows(connection: BaseDatabaseWrapper, table: str) -> tuple[int, int]:
    """Split every legacy aggregate row of `table`; returns (aggregates split, rows stored).

    Each aggregate goes through `split_legacy_row` in its own transaction, so
    an interrupted run keeps every queue it finished and a rerun carries on
    with the rest: a crash leaves each aggregate either whole or fully split.
    Nothing is dropped for age here (the next fetch applies the limit), and a
    corrupt aggregate is logged and left for fetch, which drops it by its
    own rule: a schema step should not be the one to destroy data.
    """
    quoted = connection.ops.quote_name(table)
    k = connection.ops.quote_name("key")
    split = stored = 0
    for head in iter_queue_heads(connection, table):
        if not keys.is_legacy_key(head):
            continue
        queue = keys.queue_of(head)
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT value FROM {quoted} WHERE {k} = %s", (head,))
            row = cursor.fetchone()
        if row is None:
            continue
        value = bytes(row[0]) if row[0] is not None else b""
        try:
            stored += split_legacy_row(connection, table, head, value, now_ns=time.time_ns())
        except Conflict:
            logger.info("legacy row already split by another process queue=%s", queue)
            continue
        except ValueError as exc:  # CodecError included
            logger.error("legacy row left unsplit queue=%s error=%s", queue, exc)
            continue
        split += 1
    return split, stored


def _cbor_array_head(count: int) -> bytes:
    """The head of a definite-length CBOR array in its shortest form, as Go writes it."""
    if count < 24:
        return bytes([0x80 | count])
    for info, width in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if count < 1 << (8 * width):
            return bytes([0x80 | info]) + count.to_bytes(width, "big")
    raise ValueError(f"too many messages for one CBOR array: {count}")


def fold_queue_rows(
    connection: BaseDatabaseWrapper, table: str, prefix: bytes, *, batch_size: int = 1000
) -> int:
    """Fold every row of one queue back into one legacy aggregate row under the bare
    name, in key order; returns how many messages the aggregate holds.

    The reverse of `split_legacy_row`, for a downgrade to a release that only
    reads aggregates: one transaction per queue, so a crash leaves the queue
    either as it was or folded. A row that does not decode is left in place
    (logged), never folded into the aggregate: one bad row must not make the
    whole queue unreadable. Rows are read in key pages and only the aggregate being
    built is held, so memory stays near twice the aggregate's size.
    """
    quoted = connection.ops.quote_name(table)
    k = connection.ops.quote_name("key")
    queue = prefix.decode("utf-8", errors="replace")
    high = prefix + b"\x01"
    body = bytearray()
    count = 0
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        after, op = prefix, ">="
        while True:
            cursor.execute(
                f"SELECT {k}, value FROM {quoted} WHERE {k} {op} %s AND {k} < %s "
                f"ORDER BY {k} LIMIT {int(batch_size)}",
                (after, high),
            )
            page = cursor.fetchall()
            if not page:
                break
            folded: list[tuple[bytes]] = []
            for raw_key, raw_value in page:
                key = bytes(raw_key)
                mark = len(body)
                added = 0
                try:
                    for wire in rows.message_maps(bytes(raw_value or b"")):
                        body += rows.row_value(wire)[1:]  # drop the one-element array head
                        added += 1
                except CodecError as exc:
                    del body[mark:]
                    if key == prefix:
                        logger.error("queue left unfolded: corrupt aggregate queue=%s", queue)
                        raise _Unfoldable from exc
                    logger.warning(
                        "corrupt row left unfolded queue=%s key=%s error=%s", queue, key.hex(), exc
                    )
                    continue
                count += added
                folded.append((key,))
            if folded:
                cursor.executemany(f"DELETE FROM {quoted} WHERE {k} = %s", folded)
            after, op = bytes(page[-1][0]), ">"
        if count:
            value = _cbor_array_head(count) + bytes(body)
            del body
            cursor.execute(
                f"INSERT INTO {quoted} ({k}, value) VALUES (%s, %s)",
                (prefix, value),
            )
    logger.info("folded queue into a legacy row queue=%s messages=%s", queue, count)
    return count


class _Unfoldable(Exception):
    """The queue's own aggregate is corrupt: folding would have to overwrite it."""


def fold_all_queues(connection: BaseDatabaseWrapper, table: str) -> tuple[int, int]:
    """`fold_queue_rows` for every queue of `table`; returns (queues folded, messages)."""
    folded = messages = 0
    for head in iter_queue_heads(connection, table):
        name = head.partition(keys.SEPARATOR)[0]
        try:
            keys.encode_queue_name(name.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            logger.error("rows with an invalid queue name left unfolded key=%s", head.hex())
            continue
        try:
            count = fold_queue_rows(connection, table, name)
        except _Unfoldable:
            continue
        folded += 1 if count else 0
        messages += count
    return folded, messages
