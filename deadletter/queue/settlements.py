"""Settling a handed-over message's row: written back in place, replaced by its
remainder at the tail, dropped (and archived), deleted as delivered, or deleted in
the claim transaction.

Each settlement runs in the caller's transaction when there is one (the
PostgreSQL claim transaction) and in its own otherwise, and sends its signal
only once the row change has committed.

Given `handed` (the message the handler was handed), a settlement changes the row
only while it still holds that message: compare-and-write on the key and the
value, so an edit saved while the handler ran is neither deleted nor written over
(the answer is then `CHANGED`, and the edited row waits for the next pass). A
claimed row needs no such guard: its lock keeps every writer out until the claim
commits.
"""

from __future__ import annotations

import contextlib
import logging
from datetime import UTC, datetime
from typing import Any, Final

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


class Changed:
    """The answer of a settlement whose row no longer holds the message handed over
    (an edit came between): nothing was written. False in a test, as a gone row's
    answer is, for callers that only ask whether the row was settled."""

    __slots__ = ()

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "CHANGED"


CHANGED: Final = Changed()


def _value_guard(connection: BaseDatabaseWrapper, template: str) -> str:
    return sql.statement(connection, template + " AND value = %s")


def _if_handed(
    connection: BaseDatabaseWrapper,
    template: str,
    params: tuple[Any, ...],
    key: bytes,
    handed: Message | None,
) -> int | Changed:
    """Run the write `template` (ending `WHERE {key} = %s`, `params` ending with the
    key); with `handed`, only on a row that still holds it: the rows written, 0
    when the row is gone, `CHANGED` when it holds another message now.

    The value is compared as stored: the handed message's encoding first (one
    statement, the common case), then, when that misses a row that is there, the
    row's own bytes if they decode to the very message handed over (a row written
    by another encoder)."""
    if handed is None:
        return sql.write(connection, sql.statement(connection, template), params)
    try:
        expected = codec.encode_one(handed)
    except (codec.CodecError, TypeError, ValueError) as exc:
        raise QueueingError from exc
    guarded = _value_guard(connection, template)
    written = sql.write(connection, guarded, (*params, expected))
    if written:
        return written
    found = sql.read(connection, _value_sql(connection), (key,))
    if not found:
        return 0
    current = bytes(found[0][0] or b"")
    if current == expected or not _holds(current, expected):
        return CHANGED
    return sql.write(connection, guarded, (*params, current)) or CHANGED


def _holds(value: bytes, expected: bytes) -> bool:
    """Whether `value` is one message that encodes to `expected`."""
    try:
        msgs = codec.decode(value)
        return len(msgs) == 1 and codec.encode_one(msgs[0]) == expected
    except (codec.CodecError, TypeError, ValueError):
        return False


def rewrite_msg(
    key: bytes, msg: Message, *, due_at: datetime | None = None, handed: Message | None = None
) -> bool | Changed:
    """Write `msg` back in place under `key`, keeping the row's place in the queue;
    False when the row is gone, `CHANGED` when it no longer holds `handed` (nothing
    is written then). Raises `QueueingError`.
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
            changed = _if_handed(
                connection,
                "UPDATE {table} SET value = %s, signature = %s, due_at = %s, search_pending = 1"
                " WHERE {key} = %s",
                (value, signature, connection.ops.adapt_datetimefield_value(due_at), key),
                key,
                handed,
            )
            if changed:
                incidents.note_failure(
                    connection, keys.queue_of(key), signature, at=datetime.now(UTC)
                )
        return changed if changed is CHANGED else bool(changed)
    except DatabaseError as exc:
        logger.exception("rewrite failed key=%s", key.hex())
        raise QueueingError from exc


def replace_msg(
    key: bytes, msg: Message, *, handed: Message | None = None
) -> bytes | None | Changed:
    """Delete the row `key` and park `msg` as a fresh row at its queue's tail, in
    one transaction: a crash leaves the old row or the new one, never both or
    neither. Returns the new key; None when the old row is already gone (it was
    handled or deleted elsewhere, so its remainder is not parked again), `CHANGED`
    when it no longer holds `handed` (nothing is written then).
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
            deleted = _if_handed(connection, _DELETE, (key,), key, handed)
            if not deleted:
                return CHANGED if deleted is CHANGED else None
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
    handed: Message | None = None,
) -> bool | Changed:
    """Delete the row `key` because its message is thrown away, archiving `msg`
    (with `error`, the failure that dropped it, as its `LastError`) by `actor` in
    the same transaction, where a permanent or last failure is also noted on its
    cause (`incidents`); sends `message_dropped` with `reason` after the commit.
    False when the row was already gone, `CHANGED` when it no longer holds `handed`
    (nothing is written then). Raises `QueueingError`."""
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
            deleted = _if_handed(connection, _DELETE, (key,), key, handed)
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
    return deleted if deleted is CHANGED else bool(deleted)


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


_DELETE = "DELETE FROM {table} WHERE {key} = %s"


def dequeue_handed(key: bytes, handed: Message) -> bool | Changed:
    """Delete the delivered row `key` if it still holds `handed`, the message its
    handler was given: False when it is gone, `CHANGED` when an edit came between
    (the edited message stays for the next pass). Sends `message_dequeued` once the
    delete commits; raises `DatabaseError`."""
    key = bytes(key)
    connection = sql.connection()
    deleted = _if_handed(connection, _DELETE, (key,), key, handed)
    if deleted is CHANGED:
        return deleted
    if deleted and signals.message_dequeued.receivers:
        sql.after_commit(connection, signals.message_dequeued, sender=keys.queue_of(key), key=key)
    return bool(deleted)


def dequeue_claimed(key: bytes) -> bool:
    """Delete the claimed row `key` in the claim transaction, with no savepoint of its
    own: a failure rolls the whole claim back, so the row stays and is handed over
    again. By key alone: the claim's row lock kept every edit out meanwhile. Sends
    `message_dequeued` once it commits; raises `DatabaseError`."""
    connection = sql.connection()
    with connection.cursor() as cursor:
        cursor.execute(delete_sql(connection), (key,))
        deleted = cursor.rowcount
    if deleted and signals.message_dequeued.receivers:
        sql.after_commit(connection, signals.message_dequeued, sender=keys.queue_of(key), key=key)
    return bool(deleted)
