"""Settling a handed-over message's row: written back in place, replaced by its
remainder at the tail, dropped (and archived), or deleted in the claim transaction.

Each settlement runs in the caller's transaction when there is one (the
PostgreSQL claim transaction) and in its own otherwise, and sends its signal
only once the row change has committed.
"""

from __future__ import annotations

import contextlib
import logging
from datetime import UTC, datetime

from django.db import DatabaseError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter import signals
from deadletter.queue import archive_write, incidents
from deadletter.queue.causes import signature_of
from deadletter.queue.rows import (
    LAST_ERROR_KEY,
    DropReason,
    QueueingError,
    delete_sql,
    insert_value,
)
from deadletter.store import sql
from deadletter.store.counters import record_drop
from deadletter.wire import codec, keys
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message

logger = logging.getLogger("deadletter")


def rewrite_msg(key: bytes, msg: Message, *, due_at: datetime | None = None) -> bool:
    """Write `msg` back in place under `key`, keeping the row's place in the queue;
    False when the row is gone (nothing is written then). Raises `QueueingError`.
    The cause of its `LastError` (`causes.signature_of`) goes in the same statement,
    so the admin groups failures without decoding rows, and so does `due_at`, when
    a backoff next hands it over (None: due now). The failure is noted on its cause
    (`incidents.note_failure`) in the same transaction."""
    key = bytes(key)
    connection = sql.connection()
    try:
        value = codec.encode_one(msg)
    except (codec.CodecError, TypeError, ValueError) as exc:
        raise QueueingError from exc
    signature = signature_of(msg.extra.get(LAST_ERROR_KEY), queue=keys.queue_of(key), msgs=(msg,))
    try:
        with _noting(connection, signature):
            changed = sql.write(
                connection,
                sql.statement(
                    connection,
                    "UPDATE {table} SET value = %s, signature = %s, due_at = %s, search_pending = 1"
                    " WHERE {key} = %s",
                ),
                (value, signature, connection.ops.adapt_datetimefield_value(due_at), key),
            )
            if changed:
                incidents.note_failure(
                    connection, keys.queue_of(key), signature, at=datetime.now(UTC)
                )
        return bool(changed)
    except DatabaseError as exc:
        logger.exception("rewrite failed key=%s", key.hex())
        raise QueueingError from exc


def replace_msg(key: bytes, msg: Message) -> bytes | None:
    """Delete the row `key` and park `msg` as a fresh row at its queue's tail, in
    one transaction: a crash leaves the old row or the new one, never both or
    neither. Returns the new key; None when the old row is already gone (it was
    handled or deleted elsewhere, so its remainder is not parked again).
    Sends `message_dequeued` for the old key and `message_enqueued` for the new
    one after the commit. Raises `QueueingError` (nothing changed then).
    """
    key = bytes(key)
    queue = keys.queue_of(key)
    prefix = keys.prefix_of(key)
    if msg.queued_at is None:
        msg = msg.replace(queued_at=GoTime.now())
    try:
        value = codec.encode_one(msg)
    except (codec.CodecError, TypeError, ValueError) as exc:
        raise QueueingError from exc
    connection = sql.connection()
    try:
        with transaction.atomic(using=connection.alias):
            deleted = sql.write(connection, delete_sql(connection), (key,))
            if not deleted:
                return None
            new_key = insert_value(connection, prefix, value, queue=queue)
            sql.after_commit(connection, signals.message_dequeued, sender=queue, key=key)
            sql.after_commit(
                connection, signals.message_enqueued, sender=queue, key=new_key, msg=msg
            )
    except DatabaseError as exc:
        logger.exception("replace failed queue=%s key=%s", queue, key.hex())
        raise QueueingError from exc
    return new_key


def drop_msg(
    key: bytes,
    msg: Message | None,
    reason: DropReason | str,
    *,
    actor: str = archive_write.ACTOR_DRAIN,
    error: str | None = None,
) -> bool:
    """Delete the row `key` because its message is thrown away, archiving `msg`
    (with `error`, the failure that dropped it, as its `LastError`) by `actor` in
    the same transaction, where a permanent or last failure is also noted on its
    cause (`incidents`); sends `message_dropped` with `reason` after the commit.
    False when the row was already gone. Raises `QueueingError`."""
    key = bytes(key)
    reason = DropReason(reason)
    queue = keys.queue_of(key)
    connection = sql.connection()
    archived = None
    if msg is not None and archive_write.enabled(queue):
        kept = msg if error is None else msg.replace(extra={**msg.extra, LAST_ERROR_KEY: error})
        try:
            archived = codec.encode_one(kept)
        except (codec.CodecError, TypeError, ValueError) as exc:
            raise QueueingError from exc
    try:
        with transaction.atomic(using=connection.alias):
            value = None
            if msg is None and archive_write.enabled(queue):
                found = sql.read(connection, _value_sql(connection), (key,))
                value = bytes(found[0][0] or b"") if found else None
            deleted = sql.write(connection, delete_sql(connection), (key,))
            if deleted:
                record_drop(connection, queue, reason)
                if reason in _FAILURES:
                    incidents.note_failure(
                        connection, queue, _drop_signature(queue, msg, error), at=datetime.now(UTC)
                    )
                blob = archived if archived is not None else value
                if blob is not None:
                    archive_write.archive_rows(connection, queue, [(key, blob)], reason, actor)
    except DatabaseError as exc:
        logger.exception("drop failed queue=%s key=%s", queue, key.hex())
        raise QueueingError from exc
    if deleted:
        logger.info("dropped message queue=%s key=%s reason=%s", queue, key.hex(), reason)
        sql.dropped(connection, queue, key, msg, str(reason))
    return bool(deleted)


def _noting(
    connection: BaseDatabaseWrapper, signature: str | None
) -> contextlib.AbstractContextManager[object]:
    """The transaction a row change and its cause's note share: the caller's when it
    holds one (no savepoint), one of their own otherwise; none without a note."""
    if signature is None:
        return contextlib.nullcontext()
    return transaction.atomic(using=connection.alias, savepoint=False)


_FAILURES = frozenset({DropReason.PERMANENT, DropReason.MAX_ATTEMPTS})
"""The drops that are failures of a handler, each noted on its cause."""


def _drop_signature(queue: str, msg: Message | None, error: str | None) -> str | None:
    """The cause of a dropping failure: `error`'s, else the message's `LastError`'s."""
    if error is None and msg is not None:
        error = msg.extra.get(LAST_ERROR_KEY)
    return signature_of(error, queue=queue, msgs=() if msg is None else (msg,))


def _value_sql(connection: BaseDatabaseWrapper) -> str:
    return sql.statement(connection, "SELECT value FROM {table} WHERE {key} = %s{for_update}")


def dequeue_claimed(key: bytes) -> bool:
    """Delete the claimed row `key` in the claim transaction, with no savepoint of its
    own: a failure rolls the whole claim back, so the row stays and is handed over
    again. Sends `message_dequeued` once it commits; raises `DatabaseError`."""
    connection = sql.connection()
    with connection.cursor() as cursor:
        cursor.execute(delete_sql(connection), (key,))
        deleted = cursor.rowcount
    if deleted and signals.message_dequeued.receivers:
        sql.after_commit(connection, signals.message_dequeued, sender=keys.queue_of(key), key=key)
    return bool(deleted)
