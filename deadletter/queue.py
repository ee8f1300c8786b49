"""The public queue API: store, fetch, iterate and dequeue failed messages.

Rows are read and written with plain SQL on the connection of
`DEADLETTER_DATABASE`: the hot paths need no model instances (an INSERT
through `objects.create` costs three times a cursor INSERT). A queue is read
in pages of `ORDER BY key LIMIT n` keyed on the last key seen, so no
transaction or cursor stays open between pages, nor while the caller works on
a message.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.db import DatabaseError, IntegrityError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter import codec, keys, signals
from deadletter.conf import conf
from deadletter.exceptions import DeadletterError
from deadletter.gotime import GoTime
from deadletter.messages import Message

__all__ = [
    "MAX_QUEUE_AGE",
    "Queued",
    "QueueingError",
    "adequeue",
    "afetch_failed_msgs",
    "astore_failed_msgs",
    "dequeue",
    "fetch_failed_msgs",
    "iter_failed_msgs",
    "split_legacy_row",
    "store_failed_msgs",
]

logger = logging.getLogger("deadletter")

MAX_QUEUE_AGE = timedelta(days=30)
TABLE = "deadletter_queuedmessage"

_INSERT_ATTEMPTS = 5
_REREAD_LIMIT = 5
_SPLIT_BATCH = 1000


class QueueingError(DeadletterError):
    """A message could not be written to the queue; the cause is chained."""

    def __str__(self) -> str:
        return "problem with persistent queue"


@dataclasses.dataclass(frozen=True, slots=True)
class Queued:
    """A fetched message and the key of the row it came from, to dequeue exactly that row."""

    key: bytes
    msg: Message


def _connection() -> BaseDatabaseWrapper:
    return connections[conf.DATABASE]


def _max_age_ns() -> int:
    age = conf.MAX_QUEUE_AGE
    return (age.days * 86_400 + age.seconds) * 1_000_000_000 + age.microseconds * 1_000


def _quoted(connection: BaseDatabaseWrapper, table: str) -> str:
    return connection.ops.quote_name(table)


def _write(connection: BaseDatabaseWrapper, sql: str, params: Any) -> int:
    """Run one write, in a savepoint when the caller holds a transaction so a
    failed statement does not poison it; its own autocommit otherwise."""
    if connection.in_atomic_block:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.rowcount
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


# --- store -----------------------------------------------------------------


def store_failed_msgs(queue: str, msg: Message) -> bytes:
    """Park `msg` under a fresh key at the tail of `queue`; returns the key.

    `queued_at` is stamped with now only when unset: it is the time of first
    failure and anchors the age limit, so a message handed back and parked
    again keeps it. Raises `QueueingError` when the row cannot be written and
    `ValueError` for an invalid queue name.
    """
    prefix = keys.encode_queue_name(queue)
    if msg.queued_at is None:
        msg = msg.replace(queued_at=GoTime.now())
    try:
        value = codec.encode_one(msg)
    except (codec.CodecError, TypeError, ValueError) as exc:
        logger.error("store failed queue=%s reason=unencodable error=%s", queue, exc)
        raise QueueingError from exc
    key = insert_value(prefix, value, queue=queue)
    signals.message_enqueued.send(sender=queue, key=key, msg=msg)
    return key


def insert_value(prefix: bytes, value: bytes, *, queue: str) -> bytes:
    """Insert an encoded row under a fresh key, retrying a key collision with a new key."""
    connection = _connection()
    sql = f"INSERT INTO {_quoted(connection, TABLE)} (key, value) VALUES (%s, %s)"
    for _ in range(_INSERT_ATTEMPTS):
        key = keys.new_key(prefix)
        try:
            _write(connection, sql, (key, value))
        except IntegrityError:
            logger.warning("store key collision queue=%s key=%s", queue, key.hex())
            continue
        except DatabaseError as exc:
            logger.exception("store failed queue=%s", queue)
            raise QueueingError from exc
        return key
    raise QueueingError(f"no free key after {_INSERT_ATTEMPTS} attempts")


# --- dequeue ---------------------------------------------------------------


def dequeue(key: bytes) -> None:
    """Delete exactly the row `key`; call it only once the message's outcome is durable.

    Logs and returns on failure: the row then stays, and a later drain hands
    the message over again (at least once, never lost).
    """
    key = bytes(key)
    connection = _connection()
    try:
        deleted = _write(
            connection, f"DELETE FROM {_quoted(connection, TABLE)} WHERE key = %s", (key,)
        )
    except DatabaseError:
        logger.exception("dequeue failed key=%s", key.hex())
        return
    if deleted:
        signals.message_dequeued.send(sender=keys.queue_of(key), key=key)


# --- fetch -----------------------------------------------------------------


def fetch_failed_msgs(queue: str) -> list[Queued]:
    """Every live message of `queue`, oldest first; rows stay until dequeued.

    Never raises for database or data problems: it logs and returns what it
    could read.
    """
    return list(iter_failed_msgs(queue))


def iter_failed_msgs(queue: str, batch_size: int = 1000) -> Iterator[Queued]:
    """`fetch_failed_msgs` in bounded memory: reads `batch_size` rows at a time.

    Rows the rules rewrite (a legacy aggregate, a multi-message row, a zero
    `queued_at`, an expired sibling) are rewritten first and then read again,
    so every message yielded has its own row under its own key.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    low, high = keys.queue_bounds(queue)
    prefix = low
    connection = _connection()
    table = _quoted(connection, TABLE)
    after, inclusive = low, True
    rereads: dict[bytes, int] = {}
    while True:
        op = ">=" if inclusive else ">"
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    f"SELECT key, value FROM {table} WHERE key {op} %s AND key < %s "
                    f"ORDER BY key LIMIT {int(batch_size)}",
                    (after, high),
                )
                rows = [(bytes(k), bytes(v) if v is not None else b"") for k, v in cursor]
        except DatabaseError:
            logger.exception("fetch failed queue=%s", queue)
            return
        if not rows:
            return
        restart: bytes | None = None
        for key, value in rows:
            outcome = _process_row(connection, queue, prefix, key, value)
            if isinstance(outcome, Queued):
                yield outcome
            elif outcome is _REREAD:
                rereads[key] = rereads.get(key, 0) + 1
                if rereads[key] <= _REREAD_LIMIT:
                    restart = key
                    break
                logger.error("fetch gave up on a row rewritten under it key=%s", key.hex())
        if restart is not None:
            after, inclusive = restart, True
            continue
        if len(rows) < batch_size:
            return
        after, inclusive = rows[-1][0], False


_REREAD = object()
_SKIP = object()


def _process_row(
    connection: BaseDatabaseWrapper, queue: str, prefix: bytes, key: bytes, value: bytes
) -> Queued | object:
    """Apply the semantics table to one row: a `Queued` to hand out, or skip, or reread."""
    table = TABLE
    now_ns = time.time_ns()
    if keys.is_legacy_key(key):
        try:
            split_legacy_row(
                connection, table, prefix, value, now_ns=now_ns, max_age_ns=_max_age_ns()
            )
        except codec.CodecError as exc:
            logger.error("dropping corrupt legacy row queue=%s error=%s", queue, exc)
            if _safe_delete(connection, table, key, value, queue):
                signals.message_dropped.send(sender=queue, key=key, msg=None, reason="corrupt")
            return _SKIP
        except _Conflict:
            pass
        except DatabaseError:
            logger.exception("legacy split failed queue=%s", queue)
            return _SKIP
        return _REREAD
    try:
        msgs = codec.decode(value)
    except codec.CodecError as exc:
        logger.error("dropping corrupt row queue=%s key=%s error=%s", queue, key.hex(), exc)
        if _safe_delete(connection, table, key, value, queue):
            signals.message_dropped.send(sender=queue, key=key, msg=None, reason="corrupt")
        return _SKIP
    live, changed = _apply_age_rules(queue, key, msgs, now_ns)
    if not changed and len(live) == 1:
        return Queued(key, live[0])
    if not live:
        _safe_delete(connection, table, key, value, queue)
        return _SKIP
    try:
        _rewrite_row(connection, table, prefix, key, value, live, queue)
    except _Conflict:
        pass
    except DatabaseError:
        logger.exception("rewrite failed queue=%s key=%s", queue, key.hex())
        return _SKIP
    return _REREAD


def _apply_age_rules(
    queue: str, key: bytes, msgs: list[Message], now_ns: int
) -> tuple[list[Message], bool]:
    """Drop expired messages, stamp zero `queued_at`; report whether anything changed."""
    cutoff = now_ns - _max_age_ns()
    live: list[Message] = []
    changed = False
    for msg in msgs:
        if msg.queued_at is None:
            msg = msg.replace(queued_at=GoTime(now_ns))
            changed = True
        elif msg.queued_at.unix_ns < cutoff:
            logger.info(
                "dropping expired message queue=%s key=%s queued_at=%s",
                queue,
                key.hex(),
                msg.queued_at,
            )
            signals.message_dropped.send(sender=queue, key=key, msg=msg, reason="expired")
            changed = True
            continue
        live.append(msg)
    return live, changed


class _Conflict(Exception):
    """The row changed between read and write: another reader got there first."""


def _delete_if_unchanged(
    connection: BaseDatabaseWrapper, table: str, key: bytes, value: bytes
) -> int:
    return _write(
        connection,
        f"DELETE FROM {_quoted(connection, table)} WHERE key = %s AND value = %s",
        (key, value),
    )


def _safe_delete(
    connection: BaseDatabaseWrapper, table: str, key: bytes, value: bytes, queue: str
) -> bool:
    try:
        return bool(_delete_if_unchanged(connection, table, key, value))
    except DatabaseError:
        logger.exception("delete failed queue=%s key=%s", queue, key.hex())
        return False


def _rewrite_row(
    connection: BaseDatabaseWrapper,
    table: str,
    prefix: bytes,
    key: bytes,
    old_value: bytes,
    live: list[Message],
    queue: str,
) -> None:
    """Keep the first message under `key`, give each further one its own key right
    after it, so every message keeps its place in the queue's order."""
    quoted = _quoted(connection, table)
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {quoted} SET value = %s WHERE key = %s AND value = %s",
            (codec.encode_one(live[0]), key, old_value),
        )
        if cursor.rowcount != 1:
            raise _Conflict
        rest = live[1:]
        if not rest:
            return
        cursor.execute(
            f"SELECT key FROM {quoted} WHERE key > %s AND key < %s ORDER BY key LIMIT 1",
            (key, prefix + b"\x01"),
        )
        following = cursor.fetchone()
        start = keys.key_to_int(key)
        limit = keys.key_to_int(bytes(following[0])) if following else 1 << 128
        if start + len(rest) < limit:
            new_keys = [keys.key_from_int(prefix, start + i) for i in range(1, len(rest) + 1)]
        else:
            logger.warning(
                "no room after row; split messages go to the tail queue=%s key=%s",
                queue,
                key.hex(),
            )
            new_keys = [keys.new_key(prefix) for _ in rest]
        try:
            with transaction.atomic(using=connection.alias):
                cursor.executemany(
                    f"INSERT INTO {quoted} (key, value) VALUES (%s, %s)",
                    [(k, codec.encode_one(m)) for k, m in zip(new_keys, rest, strict=True)],
                )
        except IntegrityError as exc:
            raise _Conflict from exc


def split_legacy_row(
    connection: BaseDatabaseWrapper,
    table: str,
    prefix: bytes,
    value: bytes,
    *,
    now_ns: int,
    max_age_ns: int | None = None,
) -> int:
    """Split a legacy aggregate row (a whole queue under the bare name) into
    per-message rows; returns how many rows it stored.

    Its messages are older than any per-message row already in the queue, so
    they get keys just below the first such row, in list order. The aggregate
    is deleted in the same transaction that stores its messages: a crash
    leaves either the aggregate or all of its rows. The blob is decoded item
    by item and written in batches, so memory stays bounded by the blob.
    Used by `fetch_failed_msgs` and by the data migration alike.

    Raises `codec.CodecError` for a corrupt blob (nothing written) and
    `_Conflict` if another reader split it first.
    """
    quoted = _quoted(connection, table)
    queue = prefix.decode("utf-8", errors="replace")
    count = sum(1 for _ in codec.iter_decode(value))
    stored = 0
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {quoted} WHERE key = %s AND value = %s", (prefix, value))
        if cursor.rowcount != 1:
            raise _Conflict
        if count == 0:
            return 0
        cursor.execute(
            f"SELECT key FROM {quoted} WHERE key > %s AND key < %s ORDER BY key LIMIT 1",
            (prefix, prefix + b"\x01"),
        )
        first = cursor.fetchone()
        top_ns = min(keys.parse_key(bytes(first[0])).time_ns, now_ns) if first else now_ns
        if top_ns < count:
            raise codec.CodecError("no room for the legacy messages before the queue's first row")
        base_ns = top_ns - count
        seq = keys.parse_key(keys.new_key(prefix)).seq
        cutoff = None if max_age_ns is None else now_ns - max_age_ns
        batch: list[tuple[bytes, bytes]] = []
        for index, msg in enumerate(codec.iter_decode(value)):
            if msg.queued_at is None:
                msg = msg.replace(queued_at=GoTime(now_ns))
            elif cutoff is not None and msg.queued_at.unix_ns < cutoff:
                signals.message_dropped.send(sender=queue, key=prefix, msg=msg, reason="expired")
                continue
            batch.append((keys.make_key(prefix, base_ns + index, seq), codec.encode_one(msg)))
            if len(batch) >= _SPLIT_BATCH:
                cursor.executemany(f"INSERT INTO {quoted} (key, value) VALUES (%s, %s)", batch)
                stored += len(batch)
                batch.clear()
        if batch:
            cursor.executemany(f"INSERT INTO {quoted} (key, value) VALUES (%s, %s)", batch)
            stored += len(batch)
    logger.info("split legacy row queue=%s messages=%s stored=%s", queue, count, stored)
    return stored


# --- async twins -----------------------------------------------------------


async def astore_failed_msgs(queue: str, msg: Message) -> bytes:
    return await sync_to_async(store_failed_msgs)(queue, msg)


async def afetch_failed_msgs(queue: str) -> list[Queued]:
    return await sync_to_async(fetch_failed_msgs)(queue)


async def adequeue(key: bytes) -> None:
    """`dequeue` that finishes its delete even if the awaiting task is cancelled
    (a shutdown mid-drain must not leave a handled row to be delivered again);
    the cancellation is passed on once the delete is done."""
    task = asyncio.ensure_future(sync_to_async(dequeue)(key))
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    task.result()
