"""The public queue API: store, fetch, iterate, dequeue and remove failed messages,
and their async twins, over the row rules of `rows`.

The hot paths (store, dequeue, a scan's pages) are single raw statements
(`sql`); a queue is read in pages of `ORDER BY key LIMIT n` keyed on the last
key seen, so no transaction or cursor stays open while the caller works.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, overload

from asgiref.sync import sync_to_async
from django.db import DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter import signals
from deadletter.conf import conf
from deadletter.queue import age, batch, incidents
from deadletter.queue.rows import (
    REREAD,
    OnDrop,
    Queued,
    QueueingError,
    Rereads,
    common_messages,
    delete_sql,
    insert_value,
    read_row,
)
from deadletter.store import detached, reconnect, scans, sql
from deadletter.store.transactions import transaction_on
from deadletter.wire import keys
from deadletter.wire.messages import Message

logger = logging.getLogger("deadletter")


# --- store -----------------------------------------------------------------


@overload
def store_failed_msgs(queue: str, msg: Message) -> bytes: ...


@overload
def store_failed_msgs(queue: str, msg: Sequence[Message]) -> list[bytes]: ...


def store_failed_msgs(queue: str, msg: Message | Sequence[Message]) -> bytes | list[bytes]:
    """Park `msg` under a fresh key at the tail of `queue`; returns the key.

    The row commits on its own: a rollback of the caller's transaction never
    takes it along (see `deadletter.store.detached` for how, per backend).
    `queued_at` is stamped with now only when unset: it is the time of first
    failure and anchors the age limit, so a message handed back and parked
    again keeps it. Raises `QueueingError` when the row cannot be written (or
    would be over `DEADLETTER_MAX_ROW_BYTES`, or its `queued_at` is in the
    future: `age.first_failure_error`) and `ValueError` for an invalid queue
    name. With the `otel` extra and a span active, the message carries its trace
    context (`tracing.with_traceparent`), for its deliveries' spans to link to.

    Given a list (any sequence) of messages, parks them all in one transaction
    and returns their keys, in the list's order and strictly increasing: all of
    them are parked or none is (`batch.store_many`), with one commit for the lot.
    """
    if not isinstance(msg, Message):
        if isinstance(msg, str | bytes) or not isinstance(msg, Sequence):
            raise TypeError(f"msg must be a Message or a list of them, not {type(msg).__name__}")
        return batch.store_many(queue, msg)
    prefix = keys.encode_queue_name(queue)
    prepared = batch.prepare(queue, msg, time.time_ns())
    value, signature = prepared.value, prepared.signature
    connection = sql.connection()
    private = False
    if connection.in_atomic_block or not connection.autocommit:  # attribute reads only
        try:
            where = detached.route(connection)
            if where is detached.Route.DEFERRED:
                key = keys.new_key(prefix)
                later = _ParkLater(queue, prefix, key, value, prepared.parked(), signature)
                detached.defer(connection, later, [(queue, key, value)])
                return key
            if where is detached.Route.PRIVATE:
                connection = detached.private_connection(connection)
                private = True
        except (DatabaseError, OSError) as exc:
            logger.exception("store failed queue=%s", queue)
            raise QueueingError(f"the message could not be parked: {exc}") from exc
    else:
        detached.settle_now_and_then(connection)
    key = keys.new_key(prefix)
    try:
        key = _insert(connection, prefix, value, queue, key, signature)
    except QueueingError:
        lost = reconnect.close_if_lost(connection)  # the next park connects afresh
        if not lost or private:  # the caller's transaction's park fails loudly
            raise
        key = _park_again(connection, prefix, key, value, queue, signature)
    if signals.message_enqueued.receivers:
        parked = prepared.parked()
        sql.after_commit(connection, signals.message_enqueued, sender=queue, key=key, msg=parked)
    return key


def _park_again(
    connection: BaseDatabaseWrapper,
    prefix: bytes,
    key: bytes,
    value: bytes,
    queue: str,
    signature: str | None,
) -> bytes:
    """A park's one retry, on a fresh connection after its own was lost: a row the
    lost INSERT did commit (only its answer was lost) is kept, not written twice."""
    logger.warning("store retried on a fresh connection queue=%s key=%s", queue, key.hex())
    try:
        present = sql.read(connection, _present_sql(connection), (key,))
    except DatabaseError as exc:
        logger.exception("store failed queue=%s", queue)
        raise QueueingError from exc
    if present:
        return key
    return _insert(connection, prefix, value, queue, key, signature)


def _insert(
    connection: BaseDatabaseWrapper,
    prefix: bytes,
    value: bytes,
    queue: str,
    key: bytes,
    signature: str | None,
) -> bytes:
    """The park's INSERT; a row that carries a failure (`signature`: a capture's
    `LastError`) has it noted on its cause in the same transaction. Without one,
    the single INSERT in autocommit it always was."""
    if signature is None:
        return insert_value(connection, prefix, value, queue=queue, key=key)
    with transaction_on(connection):
        key = insert_value(connection, prefix, value, queue=queue, key=key, signature=signature)
        try:
            incidents.note_failure(connection, queue, signature, at=datetime.now(UTC))
        except DatabaseError as exc:
            logger.exception("store failed queue=%s", queue)
            raise QueueingError from exc
    return key


def _present_sql(connection: BaseDatabaseWrapper) -> str:
    return sql.statement(connection, "SELECT 1 FROM {table} WHERE {key} = %s")


@dataclasses.dataclass(frozen=True, slots=True)
class _ParkLater:
    """A store held back until the caller's transaction ends (SQLite, where the
    caller holds the write lock); written under the key already handed out."""

    queue: str
    prefix: bytes
    key: bytes
    value: bytes
    msg: Message
    signature: str | None

    def __call__(self, connection: BaseDatabaseWrapper) -> bytes:
        key = _insert(connection, self.prefix, self.value, self.queue, self.key, self.signature)
        if key != self.key:
            logger.warning(
                "deferred store took another key queue=%s key=%s was=%s",
                self.queue,
                key.hex(),
                self.key.hex(),
            )
        sql.after_commit(
            connection, signals.message_enqueued, sender=self.queue, key=key, msg=self.msg
        )
        return key


# --- dequeue ---------------------------------------------------------------


class Removal(enum.Enum):
    """What `remove_msg` did: removed the row, found none, or could not tell the
    database to (the row then stays and is handed over again later)."""

    REMOVED = "removed"
    ABSENT = "absent"
    FAILED = "failed"


def remove_msg(key: bytes) -> Removal:
    """Delete exactly the row `key`, telling "removed", "was not there" and
    "the database failed" apart (the API answers 204, 404 and 503 on them).

    Never raises for database errors: it logs them and returns `FAILED`.
    Sends `message_dequeued` once the delete has committed.
    """
    key = bytes(key)
    connection = sql.connection()
    try:
        deleted = sql.write(connection, delete_sql(connection), (key,))
    except DatabaseError:
        logger.exception("dequeue failed key=%s", key.hex())
        reconnect.close_if_lost(connection)  # the next call connects afresh
        return Removal.FAILED
    if not deleted:
        return Removal.ABSENT
    if signals.message_dequeued.receivers:
        sql.after_commit(connection, signals.message_dequeued, sender=keys.queue_of(key), key=key)
    return Removal.REMOVED


def dequeue(key: bytes) -> bool:
    """Delete exactly the row `key`; call it only once the message's outcome is durable.

    Returns whether it removed the row. Logs and returns False on failure:
    the row then stays, and a later drain hands the message over again (at
    least once, never lost). `remove_msg` tells "absent" from "failed".
    """
    return remove_msg(key) is Removal.REMOVED


# --- fetch -----------------------------------------------------------------


def fetch_failed_msgs(queue: str, limit: int | None = None) -> list[Queued]:
    """Every live message of `queue` (the oldest `limit` of them), oldest first;
    rows stay until dequeued.

    Never raises for database or data problems: it logs and returns what it
    could read. With `limit`, one page query of `limit` rows reads them.
    """
    if limit is not None and type(limit) is int and 0 < limit <= PEEK_MAX:
        return _peek(queue, limit)
    return list(iter_failed_msgs(queue, limit=limit))


PEEK_MAX = 1000


def _peek(queue: str, limit: int) -> list[Queued]:
    """The oldest `limit` messages when their rows are all the common kind (one
    live, stamped message each): one page read, no per-call work beyond it.
    Any other row hands the whole read to `iter_failed_msgs`, which applies the
    rules to it; what is handed out is the same either way."""
    low, high = keys.queue_bounds(queue)
    connection = sql.connection()
    detached.settle(connection)
    try:
        rows = sql.read(connection, page_sql(connection, True, limit), (low, high))
    except DatabaseError:
        logger.exception("fetch failed queue=%s", queue)
        reconnect.close_if_lost(connection)
        return []
    cutoff, max_row_bytes = age.cutoff_ns(queue=queue), conf.MAX_ROW_BYTES
    found: list[Queued] = []
    index = 0
    while index < len(rows):
        run, index = common_messages(rows, index, cutoff, max_row_bytes)
        if not run:
            return list(iter_failed_msgs(queue, limit=limit))
        found += run
    return found


def iter_failed_msgs(
    queue: str,
    batch_size: int = 1000,
    limit: int | None = None,
    *,
    on_drop: OnDrop | None = None,
    due_now: bool = False,
) -> Iterator[Queued]:
    """`fetch_failed_msgs` in bounded memory: reads `batch_size` rows at a time,
    and no more than `limit` when fewer messages are wanted. With `due_now` (the
    drain), only the messages no backoff holds back and none that ever waited
    (`queue.waiting` reads those).

    Rows the rules rewrite (a legacy aggregate, a multi-message row, a zero
    `queued_at`, an expired sibling) are rewritten first and then read again,
    so every message yielded has its own row under its own key. What the rules
    drop on the way is told to `on_drop` (the drain counts it).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if limit is not None:
        if type(limit) is not int or limit < 0:
            raise ValueError(f"limit must be an int of at least 0, got {limit!r}")
        if limit == 0:
            return
        batch_size = min(batch_size, limit)
    low, high = keys.queue_bounds(queue)
    connection = sql.connection()
    detached.settle(connection)
    max_age_ns = age.max_age_ns(queue)
    max_row_bytes = conf.MAX_ROW_BYTES
    left = -1 if limit is None else limit
    rereads = Rereads()

    def read(inclusive: bool, after: bytes, high: bytes) -> list[tuple[Any, ...]]:
        query = sql.range_sql(connection, sql.table(), inclusive, batch_size, due_now=due_now)
        return sql.read(connection, query, (after, high))

    pages = sql.KeyPages(read, low, high, batch_size)
    try:
        for rows in pages:
            cutoff = age.cutoff_ns(max_age=max_age_ns)
            index, size = 0, len(rows)
            while index < size:
                found, index = common_messages(rows, index, cutoff, max_row_bytes)
                for item in found:
                    yield item
                    left -= 1
                    if not left:
                        return
                if found:
                    continue
                key, value = rows[index]
                index += 1
                outcome = read_row(
                    connection,
                    queue,
                    low,
                    bytes(key),
                    bytes(value or b""),
                    cutoff=cutoff,
                    max_row_bytes=max_row_bytes,
                    max_age_ns=max_age_ns,
                    on_drop=on_drop,
                )
                if isinstance(outcome, Queued):
                    yield outcome
                    left -= 1
                    if not left:
                        return
                elif outcome is REREAD:
                    if rereads.again(key):
                        pages.restart_at(key)
                        break
                    logger.error("fetch gave up on a row rewritten under it key=%s", key.hex())
    except DatabaseError:
        logger.exception("fetch failed queue=%s", queue)
        reconnect.close_if_lost(connection)


def page_sql(connection: BaseDatabaseWrapper, inclusive: bool, batch_size: int) -> str:
    """The scan's one query: a page of a queue's key range, in key order, from a key on.

    Parameters: the first key (included or not) and the range's end.
    """
    return sql.range_sql(connection, sql.table(), inclusive, batch_size)


def queue_names() -> list[str]:
    """The name of every queue that holds a row, in key order (one statement);
    an empty list, logged, when the database cannot be read."""
    connection = sql.connection()
    try:
        heads = scans.queue_heads(connection)
    except DatabaseError:
        logger.exception("listing queues failed")
        return []
    return [keys.queue_of(head) for head in heads]


def walk_queue_names(
    start: str | None, limit: int, *, descending: bool = False, include_start: bool = False
) -> list[str]:
    """Up to `limit` names of queues that hold a row, nearest first: those sorting
    after `start` (`descending`: before it; `include_start`: `start` too; from the
    first or last queue when None). One statement of at most `limit` index seeks
    however many queues there are; `ValueError` for an invalid name."""
    bound = None
    if start is not None:
        bound = keys.encode_queue_name(start)
        if descending == include_start:
            bound += b"\x01"
    found = scans.queue_keys(sql.connection(), bound, descending=descending, limit=limit)
    return [keys.queue_of(key) for key in found]


# --- async twins -----------------------------------------------------------


@overload
async def astore_failed_msgs(queue: str, msg: Message) -> bytes: ...


@overload
async def astore_failed_msgs(queue: str, msg: Sequence[Message]) -> list[bytes]: ...


async def astore_failed_msgs(queue: str, msg: Message | Sequence[Message]) -> bytes | list[bytes]:
    return await sync_to_async(lambda: store_failed_msgs(queue, msg))()


async def afetch_failed_msgs(queue: str, limit: int | None = None) -> list[Queued]:
    return await sync_to_async(fetch_failed_msgs)(queue, limit)


async def adequeue(key: bytes) -> bool:
    """`dequeue` that finishes its delete even if the awaiting task is cancelled
    (a shutdown mid-drain must not leave a handled row to be delivered again);
    the cancellation is passed on once the delete is done."""
    return await aremove_msg(key) is Removal.REMOVED


async def aremove_msg(key: bytes) -> Removal:
    """`remove_msg` that finishes its delete even if the awaiting task is cancelled."""
    task = asyncio.ensure_future(sync_to_async(remove_msg)(key))
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return task.result()
