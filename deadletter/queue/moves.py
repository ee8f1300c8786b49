"""Moving a parked row into another queue (a redrive `--to`): only the key's queue
prefix changes, so the row keeps its time and sequence, and its place in order,
in the queue it joins.

One transaction a row: the copy is inserted and the original deleted together,
so a crash leaves it in one queue or the other, never both or neither. On a
server the original is claimed `FOR UPDATE SKIP LOCKED` first, so a row a drain
holds is left to it; on SQLite the write lock is taken before the read.
"""

from __future__ import annotations

import logging

from django.db import DatabaseError, IntegrityError, transaction

from deadletter import signals
from deadletter.queue import seals
from deadletter.queue.rows import QueueingError, delete_sql
from deadletter.store import sql
from deadletter.wire import codec, keys
from deadletter.wire.messages import Message

__all__ = ["ORIGIN_KEY", "MoveConflict", "move_msg", "moved_key", "origin_of", "with_origin"]

logger = logging.getLogger("deadletter")

ORIGIN_KEY = "Origin"
"""The extra key of a message that left its first row key (a move, a restore under a
fresh key): that key in hex, so a handler's idempotency key (`DeliveryContext.key`)
stays the same. Written once; a later move keeps it."""

seals.reserve("deadletter", (ORIGIN_KEY,))


def origin_of(key: bytes, msg: Message) -> str:
    """The message's stable key in hex: its `ORIGIN_KEY` when it has one, else `key`'s."""
    origin = msg.extra.get(ORIGIN_KEY)
    return origin if isinstance(origin, str) and origin else bytes(key).hex()


def with_origin(value: bytes, key: bytes) -> bytes:
    """A row's `value` for a copy under another key: its one message carrying
    `ORIGIN_KEY` (the key it had first); the bytes as they are when it already
    carries one, holds several messages or does not decode. Every other field is
    written back as it was read (the codec's round trip)."""
    try:
        msg = codec.decode_single(value)
    except codec.CodecError:
        return value
    if msg is None or ORIGIN_KEY in msg.extra:
        return value
    try:
        return codec.encode_one(msg.replace(extra={**msg.extra, ORIGIN_KEY: bytes(key).hex()}))
    except (codec.CodecError, TypeError, ValueError):
        return value


class MoveConflict(QueueingError):
    """The destination queue already holds a row under the moved key; the original
    stays where it was."""


def moved_key(key: bytes, to_queue: str) -> bytes:
    """`key` under `to_queue`: the same 8-byte time and 8-byte sequence after the new
    prefix. A `ValueError` for a legacy aggregate row (its key has no time to keep)
    or a destination name the key layout cannot hold."""
    key = bytes(key)
    if keys.is_legacy_key(key):
        raise ValueError(
            f"{keys.queue_of(key)!r}'s legacy aggregate row cannot be moved: it holds a "
            "whole queue under one key; a drain or a fetch splits it into rows first"
        )
    parsed = keys.parse_key(key)
    return keys.make_key(to_queue, parsed.time_ns, parsed.seq)


def move_msg(key: bytes, to_queue: str) -> bytes | None:
    """Move the row `key` into `to_queue` under `moved_key(key, to_queue)`, signature
    and due time as they were, the value too but for `ORIGIN_KEY` (`with_origin`:
    the key its handler is told stays the first one); the search index marks it for
    indexing by the column's default. Returns the new key, or None when the row is
    gone or, on a server, another transaction holds it.

    `ValueError` for a legacy row or a move into its own queue; `MoveConflict`
    when the new key is taken, `QueueingError` for a database failure: nothing
    changed in either case. `message_dequeued` (the old key) and
    `message_enqueued` (the new key) are sent once the move has committed."""
    key = bytes(key)
    source = keys.queue_of(key)
    if source == to_queue:
        raise ValueError(f"cannot move a row of {source!r} into its own queue")
    new_key = moved_key(key, to_queue)
    connection = sql.connection()
    select = sql.statement(
        connection,
        "SELECT value, signature, due_at FROM {table} WHERE {key} = %s{for_update}{skip}",
        skip=" SKIP LOCKED" if sql.can_skip_locked(connection) else "",
    )
    insert = sql.statement(
        connection,
        "INSERT INTO {table} ({key}, value, signature, due_at) VALUES (%s, %s, %s, %s)",
    )
    try:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            sql.take_write_lock(connection, cursor, sql.table())
            cursor.execute(select, (key,))
            row = cursor.fetchone()
            if row is None:
                return None
            value = with_origin(bytes(row[0]) if row[0] is not None else b"", key)
            try:
                sql.write(connection, insert, (new_key, value, row[1], row[2]))
            except IntegrityError as exc:
                raise MoveConflict(
                    f"{to_queue!r} already holds a row under {new_key.hex()}; "
                    f"{key.hex()} stays in {source!r}"
                ) from exc
            cursor.execute(delete_sql(connection), (key,))
            sql.after_commit(connection, signals.message_dequeued, sender=source, key=key)
            if signals.message_enqueued.receivers:
                msg = _message_of(value)
                if msg is not None:
                    sql.after_commit(
                        connection, signals.message_enqueued, sender=to_queue, key=new_key, msg=msg
                    )
    except MoveConflict:
        logger.warning("move refused key=%s to=%s: the key is taken", key.hex(), to_queue)
        raise
    except DatabaseError as exc:
        logger.exception("move failed key=%s to=%s", key.hex(), to_queue)
        raise QueueingError from exc
    logger.info("moved message key=%s to=%s new_key=%s", key.hex(), to_queue, new_key.hex())
    return new_key


def _message_of(value: bytes) -> Message | None:
    """The one message of a row's value, for `message_enqueued`; None for a value
    of several messages or a corrupt one (the row moves all the same)."""
    try:
        return codec.decode_single(value)
    except codec.CodecError:
        return None
