"""What the drain needs to claim and settle one handed-over message: claims
(`FOR UPDATE SKIP LOCKED`, one raw statement), a row by key, the
settlements (rewrite, replace, drop), a queue's tail and row count, a
read-only preview.

Each settlement runs in the caller's transaction when there is one (the
PostgreSQL claim transaction) and in its own otherwise, and sends its signal
only once the row change has committed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from django.db import DatabaseError, Error, NotSupportedError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter import signals
from deadletter.conf import conf
from deadletter.models import QueuedMessage, QueuedMessageQuerySet
from deadletter.queue import age, archive_write, incidents
from deadletter.queue.causes import signature_of
from deadletter.queue.rows import (
    LAST_ERROR_KEY,
    REREAD,
    REREAD_LIMIT,
    DropReason,
    OnDrop,
    Queued,
    QueueingError,
    common_message,
    delete_sql,
    insert_value,
    process_row,
)
from deadletter.store import detached, sql
from deadletter.store.counters import record_drop
from deadletter.wire import codec, keys
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message

logger = logging.getLogger("deadletter")


@dataclasses.dataclass(frozen=True, slots=True)
class Preview:
    """What a drain would do with one message, read without writing: `verdict` is
    "deliver", "waiting" (a backoff holds it until `due_at`), "expired" or
    "corrupt" (`msg` is None for a corrupt row)."""

    key: bytes
    msg: Message | None
    verdict: str
    due_at: datetime | None = None


def database_vendor() -> str:
    """The vendor of the queue's database ("sqlite", "postgresql", ...)."""
    return sql.connection().vendor


def can_claim_rows() -> bool:
    """Whether the queue's database can lock single rows and skip locked ones,
    which several drains at once need to never hand a message over twice."""
    return sql.can_skip_locked(sql.connection())


def sqlite_file() -> str | None:
    """The file of a SQLite queue database; None for another backend or an in-memory one."""
    connection = sql.connection()
    if connection.vendor != "sqlite":
        return None
    name = str(connection.settings_dict["NAME"])
    if not name or name == ":memory:" or "mode=memory" in name:
        return None
    return name


def tail_key(queue: str) -> bytes | None:
    """The newest key of `queue` now, to bound a drain to the rows that were there
    when it started. What a dead process left in the spool is written first, so
    a drain delivers it even to a queue that had no row."""
    detached.settle(sql.connection())
    return _rows().tail_key(queue)


def count_rows(queue: str, until: bytes | None = None) -> int:
    """How many rows `queue` holds up to and including `until` (a legacy or
    multi-message row counts once): a progress bar's total, not a message count."""
    return _rows().count_rows(queue, until)


def _rows() -> QueuedMessageQuerySet:
    return QueuedMessage.objects.using(conf.DATABASE)


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


def atomic() -> transaction.Atomic:
    """A transaction on the queue's database: claim a row and settle it in one."""
    return transaction.atomic(using=conf.DATABASE)


class ClaimTransactions:
    """The transactions of one source's claims on the queue's connection, one a
    message (`each()`): its claim, handler and settlement commit together.

    Outside any atomic block the connection leaves autocommit once for the whole
    source and gets it back at the end, so a message costs no `SET autocommit`
    pair (two round trips on MySQL/MariaDB): each is an `atomic(savepoint=False)`
    block, committed or rolled back when it ends. Commit hooks (`on_commit`: the
    signals, a handler's own) run only after that commit, with autocommit back
    on, as after any atomic block; the next message leaves it again. Inside a
    caller's atomic block (a test case's) each message is an `atomic()` of its
    own, a savepoint, and so is each with `autocommit_between` (autocommit stays on
    between two messages, for code there that writes: the admin's log entries).
    """

    __slots__ = ("_autocommit_between", "_connection", "_each", "_kept")

    def __init__(self, *, autocommit_between: bool = False) -> None:
        connection = sql.connection()
        self._connection = connection
        self._each = _Each(connection, transaction.atomic(using=connection.alias, savepoint=False))
        self._autocommit_between = autocommit_between
        self._kept = False

    def __enter__(self) -> ClaimTransactions:
        self._kept = not self._autocommit_between and not self._connection.in_atomic_block
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        connection = self._connection
        kept, self._kept = self._kept, False
        left, self._each.left = self._each.left, False
        if not kept or not left or connection.connection is None or connection.in_atomic_block:
            return  # a closed connection is in autocommit again when it reconnects
        try:
            if exc_type is None:
                connection.commit()  # what ran after the last message (an `on_outcome`)
            else:
                connection.rollback()
            connection.set_autocommit(True)
        except DatabaseError:
            with contextlib.suppress(DatabaseError):
                connection.close()  # never left out of autocommit for what comes next

    def each(self) -> contextlib.AbstractContextManager[object]:
        """One message's transaction."""
        if not self._kept:
            return transaction.atomic(using=self._connection.alias)
        return self._each


class _Each:
    """One message's transaction with the connection out of autocommit: Django's
    atomic block, so `on_commit` and `set_rollback` work as in any, then the commit
    or rollback that a block does not do in manual transaction mode."""

    __slots__ = ("_atomic", "_connection", "left")

    def __init__(self, connection: BaseDatabaseWrapper, atomic: transaction.Atomic) -> None:
        self._connection = connection
        self._atomic = atomic
        self.left = False
        """Whether this took the connection out of autocommit (and owes it back)."""

    def __enter__(self) -> None:
        connection = self._connection
        if connection.get_autocommit():
            connection.set_autocommit(False)
            self.left = True
        self._atomic.__enter__()

    def __exit__(self, exc_type: type[BaseException] | None, exc: object, tb: Any) -> None:
        connection = self._connection
        self._atomic.__exit__(exc_type, exc, tb)  # type: ignore[arg-type]
        if exc_type is not None or connection.needs_rollback:
            self._rollback()
            return
        try:
            connection.commit()
        except DatabaseError:
            self._rollback()
            raise
        if not connection.run_on_commit:
            return
        if self.left:
            self.left = False
            connection.set_autocommit(True)  # runs the hooks, as an atomic block's end
        else:
            connection.run_and_clear_commit_hooks()

    def _rollback(self) -> None:
        """As an atomic block's end: a connection that cannot roll back is closed."""
        connection = self._connection
        try:
            connection.rollback()
        except Error:
            connection.close()


@contextlib.contextmanager
def handler_savepoint() -> Iterator[None]:
    """Run a handler inside the claim transaction so that what it wrote on the queue's
    database is undone when it fails (or marks the transaction for rollback), while
    the claim and the failure's record commit; its `on_commit` callbacks are
    dropped with them.

    The savepoint is made just before the handler's first statement (seen through
    `connection.execute_wrapper`) and left for the commit to release, so a handler
    that writes nothing here costs no statement: two round trips a message fewer
    than an `atomic()` block on the servers' hot path. Statements a handler sends
    through the driver's own connection bypass Django and are not undone.
    """
    connection = sql.connection()
    sid: str | None = None
    making = False
    hooks = len(connection.run_on_commit)

    def before_first(execute: Any, text: str, params: Any, many: bool, context: Any) -> Any:
        nonlocal sid, making
        if sid is None and not making:
            making = True  # the SAVEPOINT itself comes through here too
            try:
                sid = connection.savepoint()  # transaction.savepoint, in 5.2 and 6.1 alike
            finally:
                making = False
        return execute(text, params, many, context)

    def undo() -> None:
        connection.set_rollback(False)  # as atomic's exit does: or nothing may run
        del connection.run_on_commit[hooks:]  # its on_commit callbacks, made before any savepoint
        if sid is not None:
            try:
                connection.savepoint_rollback(sid)
            except DatabaseError:
                connection.set_rollback(True)  # the whole claim rolls back

    try:
        with connection.execute_wrapper(before_first):
            yield
    except BaseException:
        undo()
        raise
    if connection.get_rollback():
        undo()


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


@contextlib.contextmanager
def claiming(
    queue: str,
    *,
    after: bytes | None = None,
    until: bytes | None = None,
    on_drop: OnDrop | None = None,
) -> Iterator[Queued | None]:
    """A transaction holding the oldest unclaimed message of `queue` with a key
    above `after` (and at most `until`), or None when there is none.

    Settle the message (`dequeue`, `replace_msg`, `rewrite_msg`, `drop_msg`)
    inside the block: the settlement commits with the claim, and a process
    that dies before the end releases the row to the other drains untouched.
    Needs a database that `can_claim_rows`.
    """
    connection = sql.connection()
    with transaction.atomic(using=connection.alias):
        yield claim_failed_msg(queue, after=after, until=until, on_drop=on_drop)


def claim_failed_msg(
    queue: str,
    *,
    after: bytes | None = None,
    until: bytes | None = None,
    on_drop: OnDrop | None = None,
    due_now: bool = False,
) -> Queued | None:
    """Lock the oldest message of `queue` no other transaction holds, with
    `SELECT ... FOR UPDATE SKIP LOCKED`; call it inside a transaction (see
    `claiming`). Rows the rules rewrite or drop on the way are treated as by
    `iter_failed_msgs`, in the same transaction, and told to `on_drop`. With
    `due_now` (the drain), only a row no backoff ever held back.
    """
    connection = sql.connection()
    if not connection.in_atomic_block:
        raise transaction.TransactionManagementError("claim_failed_msg needs a transaction")
    if not sql.can_skip_locked(connection):
        raise NotSupportedError(f"{connection.vendor} cannot skip locked rows")
    low, high = keys.queue_bounds(queue)
    bound, inclusive = after, False
    rereads = 0
    cutoff, max_row_bytes = age.cutoff_ns(queue=queue), conf.MAX_ROW_BYTES
    while True:
        row = _claim_row(connection, low, high, bound, inclusive, until, due_now)
        if row is None:
            return None
        key, value = row
        msg = common_message(key, value, cutoff, max_row_bytes)
        if msg is not None:
            return tuple.__new__(Queued, (key, msg))
        outcome = process_row(connection, queue, low, key, value, on_drop=on_drop)
        if isinstance(outcome, Queued):
            return outcome
        if outcome is REREAD and rereads < REREAD_LIMIT:
            rereads += 1
            bound, inclusive = key, True
            continue
        rereads = 0
        bound, inclusive = key, False


def _claim_row(
    connection: BaseDatabaseWrapper,
    low: bytes,
    high: bytes,
    after: bytes | None,
    inclusive: bool,
    until: bytes | None,
    due_now: bool,
) -> tuple[bytes, bytes] | None:
    """`(key, value)` of the oldest row of `[low, high)` from `after` on (included or
    not; the range's start when None), up to `until`, locked for this transaction."""
    if after is None or after < low:
        after, inclusive = low, True
    query = sql.claim_sql(
        connection, sql.table(), inclusive=inclusive, until=until is not None, due_now=due_now
    )
    rows = sql.read(connection, query, (after, high) if until is None else (after, high, until))
    if not rows:
        return None
    key, value = rows[0]
    return bytes(key), bytes(value) if value is not None else b""


def fetch_msg(key: bytes, *, on_drop: OnDrop | None = None) -> Queued | None:
    """The message of the one row `key`, the rules of `iter_failed_msgs` applied
    (a zero `queued_at` stamped, an expired message or a corrupt row dropped, a
    multi-message row split with its first message keeping the key); None when
    there is nothing to hand over. Inside a transaction on a database that
    `can_claim_rows`, the row is locked `FOR UPDATE SKIP LOCKED`, and None also
    means another drain holds it. Never raises for database or data problems.
    """
    key = bytes(key)
    connection = sql.connection()
    lock = connection.in_atomic_block and can_claim_rows()
    name = keys.queue_of(key)
    prefix = keys.prefix_of(key)
    for _ in range(REREAD_LIMIT):
        try:
            row = _rows().locked_row(key, lock=lock)
        except DatabaseError:
            logger.exception("fetch failed key=%s", key.hex())
            return None
        if row is None:
            return None
        outcome = process_row(connection, name, prefix, key, row[1], on_drop=on_drop)
        if isinstance(outcome, Queued):
            return outcome
        if outcome is not REREAD:
            return None
    return None


def preview_failed_msgs(queue: str, batch_size: int = 1000) -> Iterator[Preview]:
    """Every message of `queue` oldest first with what a drain would do to it,
    read only: no row is split, stamped or deleted (for `--dry-run`)."""
    low, high = keys.queue_bounds(queue)
    max_age_ns = age.max_age_ns(queue)
    rows = sql.iter_range(sql.connection(), sql.table(), low, high, batch_size)
    for key, value in rows:
        try:
            msgs = codec.decode(value)
        except codec.CodecError:
            yield Preview(key, None, "corrupt")
            continue
        cutoff = age.cutoff_ns(max_age=max_age_ns)
        for msg in msgs:
            yield Preview(key, msg, "expired" if age.expired(msg.queued_at, cutoff) else "deliver")
