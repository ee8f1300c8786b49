"""Legacy aggregate rows (a whole queue as one CBOR list under the bare queue
name, as older releases wrote them): split into per-message rows, and folded
back for a downgrade.

One rule turns an aggregate into rows (`legacy_message_rows`), shared by
fetch, the data migration and the kv import and export.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter.queue import age, archive_write
from deadletter.store import scans, sql
from deadletter.store.counters import record_drop
from deadletter.wire import codec, keys
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message

__all__ = [
    "fold_all_queues",
    "fold_queue_rows",
    "legacy_message_rows",
    "split_legacy_row",
    "split_legacy_rows",
    "split_seq",
]

logger = logging.getLogger("deadletter")

_SPLIT_BATCH = 1000  # rows per transaction: a few ms of SQLite's write lock

T = TypeVar("T")
# (index, encoded row value, None) or, for an expired message, (index, None, message):
# a batch keeps only bytes, no live Message objects for the cyclic GC to walk again and again.
_Item = tuple[int, bytes | None, Message | None]


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
    max_age_ns: int | None = None,
    on_expired: Callable[[Message], None] | None = None,
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

    An expired message is archived under the key it would have had (its place
    in the order), encoded alone, in its batch's transaction.

    Used by `fetch_failed_msgs` and by the data migration alike. Raises
    `codec.CodecError` for a corrupt blob (the rows written for it are
    removed again, in batches, and the aggregate left) and `sql.Conflict` if
    another reader split it first.
    """
    queue = prefix.decode("utf-8", errors="replace")
    keep = archive_write.enabled(queue)
    count = codec.count_messages(value)
    seq = split_seq(prefix, value)
    cutoff = None if max_age_ns is None else age.cutoff_ns(now_ns, max_age_ns)
    items = _batches(_split_items(value, count, now_ns, cutoff), _SPLIT_BATCH)
    top_ns: int | None = None
    stored = 0
    reached = 0
    try:
        for batch in items:
            with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
                _claim(connection, cursor, table, prefix, len(value))
                if top_ns is None:
                    top_ns = _anchor(connection, cursor, table, prefix, seq, count, now_ns)
                base_ns = top_ns - count
                rows = []
                archived = []
                for index, encoded, msg in batch:
                    if encoded is None:
                        if on_expired is not None and msg is not None:
                            on_expired(msg)
                        else:
                            sql.dropped(connection, queue, prefix, msg, "expired")
                        if keep and msg is not None:
                            slot = keys.make_key(prefix, base_ns + index, seq ^ index)
                            archived.append((slot, codec.encode_one(msg)))
                    else:
                        rows.append((keys.make_key(prefix, base_ns + index, seq ^ index), encoded))
                if rows:
                    cursor.executemany(
                        sql.statement(
                            connection,
                            "INSERT INTO {table} ({key}, value) VALUES (%s, %s){skip_duplicate}",
                            table=table,
                        ),
                        rows,
                    )
                record_drop(connection, queue, "expired", len(batch) - len(rows))
                archive_write.archive_rows(
                    connection, queue, archived, "expired", archive_write.ACTOR_DRAIN
                )
            stored += len(rows)
            reached = batch[-1][0] + 1
    except codec.CodecError:
        if top_ns is not None:
            _undo(connection, table, prefix, top_ns - count, seq, reached)
        raise
    # Every message is stored: the aggregate goes, in a transaction of its own.
    with (
        _freed_without_zeroing(connection),
        transaction.atomic(using=connection.alias),
        connection.cursor() as cursor,
    ):
        _claim(connection, cursor, table, prefix, len(value))
        cursor.execute(
            sql.statement(connection, "DELETE FROM {table} WHERE {key} = %s", table=table),
            (prefix,),
        )
    logger.info("split legacy row queue=%s messages=%s stored=%s", queue, count, stored)
    return stored


def _split_items(value: bytes, count: int, now_ns: int, cutoff: int | None) -> Iterator[_Item]:
    """`(index, encoded row value, None)` per message; `(index, None, message)` when it expired."""
    for index, msg in enumerate(codec.iter_decode(value)):
        if index >= count:
            raise codec.CodecError(f"legacy row holds more than the {count} messages counted")
        if msg.queued_at is None:
            msg = msg.replace(queued_at=GoTime(now_ns))
        elif cutoff is not None and age.expired(msg.queued_at, cutoff):
            yield index, None, msg
            continue
        yield index, codec.encode_one(msg), None


@contextlib.contextmanager
def _freed_without_zeroing(connection: BaseDatabaseWrapper) -> Iterator[None]:
    """On SQLite, `secure_delete = FAST` while a big aggregate is deleted.

    An SQLite built with SECURE_DELETE (Debian's is) overwrites every page it
    frees with zeros, writing the whole aggregate to the WAL again under the
    write lock (docs/legacy.md has the figures). FAST only
    skips the zeroing that costs extra I/O, and the aggregate's messages live
    on in their own rows, so nothing deleted is left readable that is not
    readable anyway. The connection's own setting is put back afterwards.
    """
    with sql.sqlite_pragma(
        connection, "secure_delete", "FAST", restore=lambda v: "FAST" if v == 2 else str(v)
    ):
        yield


def _claim(
    connection: BaseDatabaseWrapper, cursor: Any, table: str, prefix: bytes, length: int
) -> None:
    """Take the write lock and check the aggregate is still the one read, or `sql.Conflict`.

    On SQLite the whole file is locked (without it, a deferred transaction that
    read first could not write after another commit); elsewhere the aggregate's
    row, so two splitters take turns. The length, not the bytes, tells whether
    the row is still the one read: sending a big blob back to compare it costs
    two more copies of it.
    """
    sql.take_write_lock(connection, cursor, table)
    cursor.execute(
        sql.statement(
            connection,
            "SELECT 1 FROM {table} WHERE {key} = %s AND length(value) = %s{for_update}",
            table=table,
        ),
        (prefix, length),
    )
    if cursor.fetchone() is None:
        raise sql.Conflict


_ANCHOR_PROBE = 64


def _anchor(
    connection: BaseDatabaseWrapper,
    cursor: Any,
    table: str,
    prefix: bytes,
    seq: int,
    count: int,
    now_ns: int,
) -> int:
    """`top_ns` for an aggregate of `count` messages: from a row an earlier attempt stored, if
    any is among the queue's first rows; else just below the queue's first row (or now)."""
    cursor.execute(
        sql.statement(
            connection,
            "SELECT {key} FROM {table} WHERE {key} > %s AND {key} < %s ORDER BY {key} LIMIT {n}",
            table=table,
            n=_ANCHOR_PROBE,
        ),
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
        raise codec.CodecError("no room for the legacy messages before the queue's first row")
    return top_ns


def _undo(
    connection: BaseDatabaseWrapper, table: str, prefix: bytes, base_ns: int, seq: int, upto: int
) -> None:
    """Remove the rows a split wrote for messages `0..upto` (a corrupt aggregate), in batches."""
    for start in range(0, upto, _SPLIT_BATCH):
        doomed = [
            (keys.make_key(prefix, base_ns + i, seq ^ i),)
            for i in range(start, min(upto, start + _SPLIT_BATCH))
        ]
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.executemany(
                sql.statement(connection, "DELETE FROM {table} WHERE {key} = %s", table=table),
                doomed,
            )


def legacy_message_rows(
    prefix: bytes,
    value: bytes,
    *,
    count: int,
    top_ns: int,
    seq: int,
    now_ns: int,
    max_age_ns: int | None = None,
    on_expired: Callable[[Message], None] | None = None,
) -> Iterator[tuple[bytes, bytes]]:
    """The `(key, value)` rows a legacy aggregate of `count` messages becomes, in list order.

    The one rule for turning an aggregate into rows, shared by
    `split_legacy_row` (fetch and the data migration) and by the kv import and
    export: message `i` gets the key `(top_ns - count + i, seq)`, so all of
    them sort just below `top_ns` in the aggregate's order; a zero
    `queued_at` is stamped with `now_ns` so the age limit can fire for it;
    with `max_age_ns` an expired message is dropped (its slot stays empty) and
    handed to `on_expired`.
    The blob is decoded one message at a time, so only the current message
    is held beside it. Raises `codec.CodecError` for a corrupt blob.
    """
    if top_ns < count:
        raise codec.CodecError("no room for the legacy messages before the queue's first row")
    base_ns = top_ns - count
    cutoff = None if max_age_ns is None else age.cutoff_ns(now_ns, max_age_ns)
    for index, encoded, msg in _split_items(value, count, now_ns, cutoff):
        if encoded is None:
            if on_expired is not None and msg is not None:
                on_expired(msg)
            continue
        yield keys.make_key(prefix, base_ns + index, seq), encoded


def _batches(rows: Iterator[T], size: int) -> Iterator[list[T]]:
    batch: list[T] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def split_legacy_rows(connection: BaseDatabaseWrapper, table: str) -> tuple[int, int]:
    """Split every legacy aggregate row of `table`; returns (aggregates split, rows stored).

    Each aggregate goes through `split_legacy_row` (its own short transactions)
    in turn, so an interrupted run keeps every queue it finished and a rerun
    carries on with the rest: a crash leaves the queues before the one in hand
    fully split, that one's aggregate beside the batches stored so far (none,
    some or all of its messages, each once, in order) and the rest untouched.
    Nothing is dropped for age here (the next fetch applies the limit), and a
    corrupt aggregate is logged and left for fetch, which drops it by its
    own rule: a schema step should not be the one to destroy data.
    """
    split = stored = 0
    for head in scans.queue_heads(connection, table):
        if not keys.is_legacy_key(head):
            continue
        queue = keys.queue_of(head)
        with connection.cursor() as cursor:
            cursor.execute(
                sql.statement(
                    connection, "SELECT value FROM {table} WHERE {key} = %s", table=table
                ),
                (head,),
            )
            row = cursor.fetchone()
        if row is None:
            continue
        value = bytes(row[0]) if row[0] is not None else b""
        try:
            stored += split_legacy_row(connection, table, head, value, now_ns=time.time_ns())
        except sql.Conflict:
            logger.info("legacy row already split by another process queue=%s", queue)
            continue
        except (codec.CodecError, ValueError) as exc:
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
    queue = prefix.decode("utf-8", errors="replace")
    high = prefix + b"\x01"
    body = bytearray()
    count = 0
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:

        def read(inclusive: bool, after: bytes, high: bytes) -> list[tuple[Any, ...]]:
            cursor.execute(sql.range_sql(connection, table, inclusive, batch_size), (after, high))
            return cursor.fetchall()

        for rows in sql.KeyPages(read, prefix, high, batch_size):
            folded: list[tuple[bytes]] = []
            for raw_key, raw_value in rows:
                key = bytes(raw_key)
                mark = len(body)
                added = 0
                try:
                    for msg in codec.iter_decode(bytes(raw_value or b"")):
                        item = codec.encode_one(msg)
                        body += item[1:]  # drop the one-element array head
                        added += 1
                except codec.CodecError as exc:
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
                cursor.executemany(
                    sql.statement(connection, "DELETE FROM {table} WHERE {key} = %s", table=table),
                    folded,
                )
        if count:
            value = _cbor_array_head(count) + bytes(body)
            del body
            cursor.execute(
                sql.statement(
                    connection, "INSERT INTO {table} ({key}, value) VALUES (%s, %s)", table=table
                ),
                (prefix, value),
            )
    logger.info("folded queue into a legacy row queue=%s messages=%s", queue, count)
    return count


class _Unfoldable(Exception):
    """The queue's own aggregate is corrupt: folding would have to overwrite it."""


def fold_all_queues(connection: BaseDatabaseWrapper, table: str) -> tuple[int, int]:
    """`fold_queue_rows` for every queue of `table`; returns (queues folded, messages)."""
    folded = messages = 0
    for head in scans.queue_heads(connection, table):
        name = keys.prefix_of(head)
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
