"""Parking a list of messages in one transaction (`store_failed_msgs(queue, [...])`).

Every message of the list is parked or none is, under keys strictly increasing
in the list's order, with one commit for the lot: where each commit waits for
the disk (SQLite with `synchronous=FULL`, a server's default), a list costs one
sync, not one a message. The caller's transaction never takes the list along,
by the routes a single park takes (`deadletter.store.detached`): a second
connection on a server, or one spool record for the whole list on SQLite.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime

from django.db import DatabaseError, IntegrityError
from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter import signals
from deadletter.conf import conf
from deadletter.queue import age, incidents, tracing
from deadletter.queue.causes import signature_at_park
from deadletter.queue.rows import QueueingError
from deadletter.store import detached, reconnect, sql
from deadletter.store.transactions import transaction_on
from deadletter.wire import codec, keys
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message

logger = logging.getLogger("deadletter")

_INSERT_ATTEMPTS = 10


@dataclasses.dataclass(frozen=True, slots=True)
class Prepared:
    """One message ready to be written: its row's bytes, the `queued_at` stamp the
    store gave it (None when it had one), and its cause's signature."""

    msg: Message
    value: bytes
    stamp_ns: int | None
    signature: str | None

    def parked(self) -> Message:
        """The message as its row holds it, for `message_enqueued`: stamped with the
        store's `queued_at` when it had none (a copy: the caller's stays unstamped)."""
        if self.stamp_ns is None:
            return self.msg
        return self.msg.replace(queued_at=GoTime(self.stamp_ns))


def prepare(queue: str, msg: Message, now_ns: int, index: int | None = None) -> Prepared:
    """Check and encode one message for `queue` (nothing written); `QueueingError`
    naming the list's `index` when the message cannot be parked."""
    where = "" if index is None else f"message {index}: "
    msg = tracing.with_traceparent(msg)
    stamp_ns: int | None = None
    if msg.queued_at is None:
        stamp_ns = now_ns  # written into the row; `msg` itself stays as the caller has it
    elif (future := age.first_failure_error(msg.queued_at, now_ns)) is not None:
        logger.error("store failed queue=%s reason=future-queued-at error=%s", queue, future)
        raise QueueingError(where + future)
    try:
        value = codec.encode_one(msg, stamp_ns)
    except (codec.CodecError, TypeError, ValueError) as exc:
        logger.error("store failed queue=%s reason=unencodable error=%s", queue, exc)
        if where:
            raise QueueingError(f"{where}{exc}") from exc
        raise QueueingError from exc
    if len(value) > conf.MAX_ROW_BYTES:
        logger.error("store failed queue=%s reason=too-large bytes=%d", queue, len(value))
        raise QueueingError(
            f"{where}the message is {len(value):,} bytes, over DEADLETTER_MAX_ROW_BYTES "
            f"({conf.MAX_ROW_BYTES:,})"
        )
    return Prepared(msg, value, stamp_ns, signature_at_park(queue, msg))


def store_many(queue: str, msgs: Sequence[Message]) -> list[bytes]:
    """Park `msgs` at the tail of `queue` in one transaction; their keys, in order.

    Every message is checked and encoded before anything is written: one that
    cannot be parked is a `QueueingError` naming its index, and none is parked.
    """
    prefix = keys.encode_queue_name(queue)
    for index, msg in enumerate(msgs):
        if not isinstance(msg, Message):
            raise TypeError(f"message {index} is a {type(msg).__name__}, not a Message")
    now_ns = time.time_ns()
    rows = [prepare(queue, msg, now_ns, index) for index, msg in enumerate(msgs)]
    if not rows:
        return []
    connection = sql.connection()
    private = False
    if connection.in_atomic_block or not connection.autocommit:  # attribute reads only
        try:
            where = detached.route(connection)
            if where is detached.Route.DEFERRED:
                handed = [keys.new_key(prefix) for _ in rows]
                later = _ParkManyLater(queue, tuple(handed), tuple(rows))
                records = [(queue, key, row.value) for key, row in zip(handed, rows, strict=True)]
                detached.defer(connection, later, records)
                return handed
            if where is detached.Route.PRIVATE:
                connection = detached.private_connection(connection)
                private = True
        except (DatabaseError, OSError) as exc:
            logger.exception("store failed queue=%s", queue)
            raise QueueingError(f"the messages could not be parked: {exc}") from exc
    else:
        detached.settle_now_and_then(connection)
    handed = [keys.new_key(prefix) for _ in rows]
    try:
        handed = insert_many(connection, queue, prefix, handed, rows)
    except QueueingError:
        lost = reconnect.close_if_lost(connection)  # the next park connects afresh
        if not lost or private:  # the caller's transaction's park fails loudly
            raise
        handed = _park_again(connection, queue, prefix, handed, rows)
    _announce(connection, queue, handed, rows)
    return handed


def _park_again(
    connection: BaseDatabaseWrapper,
    queue: str,
    prefix: bytes,
    handed: list[bytes],
    rows: list[Prepared],
) -> list[bytes]:
    """The list's one retry on a fresh connection after its own was lost: the rows
    went in one transaction, so the first key tells whether the lost commit did
    happen (only its answer was lost), and then nothing is written twice."""
    logger.warning("store retried on a fresh connection queue=%s rows=%d", queue, len(rows))
    present = sql.statement(connection, "SELECT 1 FROM {table} WHERE {key} = %s")
    try:
        if sql.read(connection, present, (handed[0],)):
            return handed
    except DatabaseError as exc:
        logger.exception("store failed queue=%s", queue)
        raise QueueingError from exc
    return insert_many(connection, queue, prefix, handed, rows)


def insert_many(
    connection: BaseDatabaseWrapper,
    queue: str,
    prefix: bytes,
    handed: list[bytes],
    rows: Sequence[Prepared],
) -> list[bytes]:
    """Insert `rows` under `handed` and note their failures on their causes, in one
    transaction; the keys they took. A key collision (possible only in theory)
    rolls it all back and tries again under fresh keys, still in order; any other
    failure is a `QueueingError` with nothing written."""
    query = sql.statement(
        connection, "INSERT INTO {table} ({key}, value, signature) VALUES (%s, %s, %s)"
    )
    causes = Counter(row.signature for row in rows if row.signature is not None)
    for _ in range(_INSERT_ATTEMPTS):
        params = [(key, row.value, row.signature) for key, row in zip(handed, rows, strict=True)]
        try:
            with transaction_on(connection, savepoint=True):
                if connection.vendor == "mysql":
                    for one in params:
                        sql.refuse_oversized(connection, query, one)
                with connection.cursor() as cursor:
                    cursor.executemany(query, params)
                at = datetime.now(UTC)
                for signature, n in causes.items():
                    incidents.note_failure(connection, queue, signature, at=at, n=n)
        except IntegrityError:
            logger.warning("store key collision queue=%s rows=%d", queue, len(rows))
            handed = [keys.new_key(prefix) for _ in rows]
            continue
        except DatabaseError as exc:
            logger.exception("store failed queue=%s rows=%d", queue, len(rows))
            raise QueueingError(f"the messages could not be parked: {exc}") from exc
        return handed
    raise QueueingError(f"no free keys after {_INSERT_ATTEMPTS} attempts")


def _announce(
    connection: BaseDatabaseWrapper, queue: str, handed: Sequence[bytes], rows: Sequence[Prepared]
) -> None:
    if not signals.message_enqueued.receivers:
        return
    for key, row in zip(handed, rows, strict=True):
        sql.after_commit(
            connection, signals.message_enqueued, sender=queue, key=key, msg=row.parked()
        )


@dataclasses.dataclass(frozen=True, slots=True)
class _ParkManyLater:
    """A list held back until the caller's transaction ends (SQLite, where the
    caller holds the write lock); written under the keys already handed out."""

    queue: str
    handed: tuple[bytes, ...]
    rows: tuple[Prepared, ...]

    def __call__(self, connection: BaseDatabaseWrapper) -> list[bytes]:
        prefix = keys.encode_queue_name(self.queue)
        taken = insert_many(connection, self.queue, prefix, list(self.handed), self.rows)
        if taken != list(self.handed):
            logger.warning(
                "deferred store took other keys queue=%s first=%s was=%s",
                self.queue,
                taken[0].hex(),
                self.handed[0].hex(),
            )
        _announce(connection, self.queue, taken, self.rows)
        return taken
