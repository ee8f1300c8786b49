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
import contextlib
import dataclasses
import enum
import logging
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

from asgiref.sync import sync_to_async
from django.db import (
    DatabaseError,
    IntegrityError,
    NotSupportedError,
    transaction,
)
from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter import codec, detached, keys, signals, sql
from deadletter.causes import signature_of
from deadletter.conf import conf
from deadletter.counters import record_drop
from deadletter.exceptions import DeadletterError
from deadletter.gotime import GoTime
from deadletter.legacy import iter_queue_heads, split_legacy_row
from deadletter.messages import Message

__all__ = [
    "MAX_QUEUE_AGE",  # noqa: F822  (the module's __getattr__: the setting, read when asked)
    "Queued",
    "QueueingError",
    "Removal",
    "adequeue",
    "afetch_failed_msgs",
    "aremove_msg",
    "astore_failed_msgs",
    "dequeue",
    "fetch_failed_msgs",
    "iter_failed_msgs",
    "remove_msg",
    "store_failed_msgs",
]

logger = logging.getLogger("deadletter")

ATTEMPTS_KEY = "Attempts"
LAST_ERROR_KEY = "LastError"
"""The `extra` keys the drain records a failed delivery under (Go-style names)."""

_INSERT_ATTEMPTS = 5
_REREAD_LIMIT = 5


class QueueingError(DeadletterError):
    """A message could not be written to the queue; the cause is chained.

    The text starts with the seed's "problem with persistent queue" and then
    says what went wrong: the message given, else the chained cause.
    """

    def __str__(self) -> str:
        detail = " ".join(str(arg) for arg in self.args)
        cause = self.__cause__
        if not detail and cause is not None:
            detail = f"{type(cause).__name__}: {cause}".rstrip(": ")
        return (
            f"problem with persistent queue: {detail}"
            if detail
            else "problem with persistent queue"
        )


class Queued(NamedTuple):
    """A fetched message and the key of the row it came from, to dequeue exactly that row.

    Immutable; a named tuple rather than a frozen dataclass because a scan
    builds one per message and a frozen dataclass costs three times as much.
    """

    key: bytes
    msg: Message

    @property
    def attempts(self) -> int:
        """How many deliveries the drain has tried and seen fail; 0 when never tried."""
        value = self.msg.extra.get(ATTEMPTS_KEY)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        return 0

    @property
    def last_error(self) -> str | None:
        """The last failed delivery's error as `ExcClass: message`; None when never tried."""
        value = self.msg.extra.get(LAST_ERROR_KEY)
        return value if isinstance(value, str) and value else None


def __getattr__(name: str) -> Any:
    """`MAX_QUEUE_AGE` is the `DEADLETTER_MAX_QUEUE_AGE` setting, read when asked."""
    if name == "MAX_QUEUE_AGE":
        return conf.MAX_QUEUE_AGE
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _max_age_ns() -> int:
    age = conf.MAX_QUEUE_AGE
    return (age.days * 86_400 + age.seconds) * 1_000_000_000 + age.microseconds * 1_000


# --- store -----------------------------------------------------------------


def store_failed_msgs(queue: str, msg: Message) -> bytes:
    """Park `msg` under a fresh key at the tail of `queue`; returns the key.

    The row commits on its own: a rollback of the caller's transaction never
    takes it along (see `deadletter.detached` for how, per backend).
    `queued_at` is stamped with now only when unset: it is the time of first
    failure and anchors the age limit, so a message handed back and parked
    again keeps it. Raises `QueueingError` when the row cannot be written (or
    would be over `DEADLETTER_MAX_ROW_BYTES`) and `ValueError` for an invalid
    queue name.
    """
    prefix = keys.encode_queue_name(queue)
    if msg.queued_at is None:
        msg = msg.replace(queued_at=GoTime.now())
    try:
        value = codec.encode_one(msg)
    except (codec.CodecError, TypeError, ValueError) as exc:
        logger.error("store failed queue=%s reason=unencodable error=%s", queue, exc)
        raise QueueingError from exc
    if len(value) > conf.MAX_ROW_BYTES:
        logger.error("store failed queue=%s reason=too-large bytes=%d", queue, len(value))
        raise QueueingError(
            f"the message is {len(value):,} bytes, over DEADLETTER_MAX_ROW_BYTES "
            f"({conf.MAX_ROW_BYTES:,})"
        )
    connection = sql.connection()
    instrumented = False
    if connection.in_atomic_block:  # one attribute read on the common path
        where = detached.route(connection)
        if where is detached.Route.DEFERRED:
            key = keys.new_key(prefix)
            detached.defer(connection, _ParkLater(queue, prefix, key, value, msg))
            return key
        if where is detached.Route.PRIVATE:
            try:
                connection = detached.private_connection(connection)
            except DatabaseError as exc:
                logger.exception("store failed queue=%s", queue)
                raise QueueingError from exc
            instrumented = True
    key = insert_value(connection, prefix, value, queue=queue, instrumented=instrumented)
    sql.after_commit(connection, signals.message_enqueued, sender=queue, key=key, msg=msg)
    return key


@dataclasses.dataclass(frozen=True, slots=True)
class _ParkLater:
    """A store held back until the caller's transaction ends (SQLite, where the
    caller holds the write lock); written under the key already handed out."""

    queue: str
    prefix: bytes
    key: bytes
    value: bytes
    msg: Message

    def __call__(self, connection: BaseDatabaseWrapper) -> bytes:
        key = insert_value(connection, self.prefix, self.value, queue=self.queue, key=self.key)
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


def insert_value(
    connection: BaseDatabaseWrapper,
    prefix: bytes,
    value: bytes,
    *,
    queue: str,
    key: bytes | None = None,
    instrumented: bool = False,
) -> bytes:
    """Insert an encoded row under `key` (a fresh one when None), retrying a key
    collision with a new key."""
    query = f"INSERT INTO {sql.quoted(connection, sql.TABLE)} (key, value) VALUES (%s, %s)"
    for _ in range(_INSERT_ATTEMPTS):
        if key is None:
            key = keys.new_key(prefix)
        try:
            sql.write(connection, query, (key, value), instrumented=instrumented)
        except IntegrityError:
            logger.warning("store key collision queue=%s key=%s", queue, key.hex())
            key = None
            continue
        except DatabaseError as exc:
            logger.exception("store failed queue=%s", queue)
            raise QueueingError from exc
        return key
    raise QueueingError(f"no free key after {_INSERT_ATTEMPTS} attempts")


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
        deleted = sql.write(connection, _delete_sql(connection), (key,))
    except DatabaseError:
        logger.exception("dequeue failed key=%s", key.hex())
        return Removal.FAILED
    if not deleted:
        return Removal.ABSENT
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
    return list(iter_failed_msgs(queue, limit=limit))


def iter_failed_msgs(
    queue: str, batch_size: int = 1000, limit: int | None = None
) -> Iterator[Queued]:
    """`fetch_failed_msgs` in bounded memory: reads `batch_size` rows at a time,
    and no more than `limit` when fewer messages are wanted.

    Rows the rules rewrite (a legacy aggregate, a multi-message row, a zero
    `queued_at`, an expired sibling) are rewritten first and then read again,
    so every message yielded has its own row under its own key.
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
    prefix = low
    connection = sql.connection()
    max_age_ns = _max_age_ns()
    max_row_bytes = conf.MAX_ROW_BYTES
    left = -1 if limit is None else limit
    decode_single, separator, new_queued = codec.decode_single, keys.NUL, tuple.__new__
    after, inclusive = low, True
    rereads: dict[bytes, int] = {}
    while True:
        try:
            rows = sql.read(connection, page_sql(connection, inclusive, batch_size), (after, high))
        except DatabaseError:
            logger.exception("fetch failed queue=%s", queue)
            return
        if not rows:
            return
        restart: bytes | None = None
        cutoff = time.time_ns() - max_age_ns
        for key, value in rows:
            # The common row (one live, stamped message) is handed out here;
            # every other row goes through the rules in `_process_row`.
            if separator in key and len(value) <= max_row_bytes:
                try:
                    msg = decode_single(value)
                except codec.CodecError:
                    msg = None
                if msg is not None:
                    stamped = msg.queued_at
                    if stamped is not None and stamped.unix_ns >= cutoff:
                        yield new_queued(Queued, (key, msg))
                        left -= 1
                        if not left:
                            return
                        continue
            outcome = _process_row(
                connection, queue, prefix, bytes(key), bytes(value or b""), max_age_ns=max_age_ns
            )
            if isinstance(outcome, Queued):
                yield outcome
                left -= 1
                if not left:
                    return
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


def page_sql(connection: BaseDatabaseWrapper, inclusive: bool, batch_size: int) -> str:
    """The scan's one query: a page of a queue's key range, in key order, from a key on.

    Parameters: the first key (included or not) and the range's end.
    """
    return sql.range_sql(connection, sql.TABLE, inclusive, batch_size)


_REREAD = object()
_SKIP = object()


def _process_row(
    connection: BaseDatabaseWrapper,
    queue: str,
    prefix: bytes,
    key: bytes,
    value: bytes,
    *,
    max_age_ns: int | None = None,
) -> Queued | object:
    """Apply the semantics table to one row: a `Queued` to hand out, or skip, or reread.

    A message row over `DEADLETTER_MAX_ROW_BYTES` is skipped undecoded and left
    in place for an operator (legacy aggregates are split a message at a time
    whatever their size).
    """
    if keys.NUL in key and len(value) > conf.MAX_ROW_BYTES:
        logger.warning(
            "row too large, left for an operator queue=%s key=%s bytes=%d limit=%d",
            queue,
            key.hex(),
            len(value),
            conf.MAX_ROW_BYTES,
        )
        return _SKIP
    table = sql.TABLE
    now_ns = time.time_ns()
    if max_age_ns is None:
        max_age_ns = _max_age_ns()
    if keys.is_legacy_key(key):
        try:
            split_legacy_row(connection, table, prefix, value, now_ns=now_ns, max_age_ns=max_age_ns)
        except codec.CodecError as exc:
            logger.error("dropping corrupt legacy row queue=%s error=%s", queue, exc)
            if _safe_delete(connection, table, key, value, queue, "corrupt"):
                sql.dropped(connection, queue, key, None, "corrupt")
            return _SKIP
        except sql.Conflict:
            pass
        except DatabaseError:
            logger.exception("legacy split failed queue=%s", queue)
            return _SKIP
        return _REREAD
    try:
        msgs = codec.decode(value)
    except codec.CodecError as exc:
        logger.error("dropping corrupt row queue=%s key=%s error=%s", queue, key.hex(), exc)
        if _safe_delete(connection, table, key, value, queue, "corrupt"):
            sql.dropped(connection, queue, key, None, "corrupt")
        return _SKIP
    live, expired, changed = _apply_age_rules(queue, key, msgs, now_ns, max_age_ns)
    if not changed and len(live) == 1:
        return Queued(key, live[0])
    if not live:
        if _safe_delete(connection, table, key, value, queue, "expired", len(expired)):
            for msg in expired:
                sql.dropped(connection, queue, key, msg, "expired")
        return _SKIP
    try:
        with transaction.atomic(using=connection.alias):
            _rewrite_row(connection, table, prefix, key, value, live, queue)
            record_drop(connection, queue, "expired", len(expired))
    except sql.Conflict:
        return _REREAD
    except DatabaseError:
        logger.exception("rewrite failed queue=%s key=%s", queue, key.hex())
        return _SKIP
    for msg in expired:
        sql.dropped(connection, queue, key, msg, "expired")
    return _REREAD


def _apply_age_rules(
    queue: str, key: bytes, msgs: list[Message], now_ns: int, max_age_ns: int
) -> tuple[list[Message], list[Message], bool]:
    """Split off expired messages, stamp zero `queued_at`: (live, expired, changed)."""
    cutoff = now_ns - max_age_ns
    live: list[Message] = []
    expired: list[Message] = []
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
            expired.append(msg)
            changed = True
            continue
        live.append(msg)
    return live, expired, changed


def _delete_if_unchanged(
    connection: BaseDatabaseWrapper, table: str, key: bytes, value: bytes
) -> int:
    return sql.write(
        connection,
        f"DELETE FROM {sql.quoted(connection, table)} WHERE key = %s AND value = %s",
        (key, value),
    )


def _safe_delete(
    connection: BaseDatabaseWrapper,
    table: str,
    key: bytes,
    value: bytes,
    queue: str,
    reason: str,
    dropped: int = 1,
) -> bool:
    """Delete a dropped row and count the drop (`counters.record_drop`) in one transaction."""
    try:
        with transaction.atomic(using=connection.alias):
            deleted = bool(_delete_if_unchanged(connection, table, key, value))
            if deleted:
                record_drop(connection, queue, reason, dropped)
            return deleted
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
    quoted = sql.quoted(connection, table)
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {quoted} SET value = %s WHERE key = %s AND value = %s",
            (codec.encode_one(live[0]), key, old_value),
        )
        if cursor.rowcount != 1:
            raise sql.Conflict
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
            raise sql.Conflict from exc


# --- drain support: claim, settle, preview ---------------------------------
#
# What `deadletter.drain` needs to settle one handed-over message. Each
# function runs in the caller's transaction when there is one (the
# PostgreSQL claim transaction) and in its own otherwise, and sends its
# signal only once the row change has committed.


@dataclasses.dataclass(frozen=True, slots=True)
class Preview:
    """What a drain would do with one message, read without writing: `verdict` is
    "deliver", "expired" or "corrupt" (`msg` is None for a corrupt row)."""

    key: bytes
    msg: Message | None
    verdict: str


def database_vendor() -> str:
    """The vendor of the queue's database ("sqlite", "postgresql", ...)."""
    return sql.connection().vendor


def can_claim_rows() -> bool:
    """Whether the queue's database can lock single rows and skip locked ones,
    which several drains at once need to never hand a message over twice."""
    connection = sql.connection()
    return connection.vendor != "sqlite" and connection.features.has_select_for_update_skip_locked


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
    """The newest key of `queue` now (one index lookup), to bound a drain to the
    rows that were there when it started."""
    low, high = keys.queue_bounds(queue)
    connection = sql.connection()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT key FROM {sql.quoted(connection, sql.TABLE)} "
            "WHERE key >= %s AND key < %s ORDER BY key DESC LIMIT 1",
            (low, high),
        )
        row = cursor.fetchone()
    return bytes(row[0]) if row else None


def count_rows(queue: str, until: bytes | None = None) -> int:
    """How many rows `queue` holds up to and including `until` (a legacy or
    multi-message row counts once): a progress bar's total, not a message count."""
    low, high = keys.queue_bounds(queue)
    connection = sql.connection()
    query = f"SELECT COUNT(*) FROM {sql.quoted(connection, sql.TABLE)} WHERE key >= %s AND key < %s"
    params: tuple[bytes, ...] = (low, high)
    if until is not None:
        query += " AND key <= %s"
        params += (until,)
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return int(cursor.fetchone()[0])


def _delete_sql(connection: BaseDatabaseWrapper) -> str:
    return f"DELETE FROM {sql.quoted(connection, sql.TABLE)} WHERE key = %s"


def rewrite_msg(key: bytes, msg: Message) -> bool:
    """Write `msg` back in place under `key`, keeping the row's place in the queue;
    False when the row is gone (nothing is written then). Raises `QueueingError`.
    The cause of its `LastError` (`causes.signature_of`) goes in the same statement,
    so the admin groups failures without decoding rows."""
    key = bytes(key)
    connection = sql.connection()
    try:
        value = codec.encode_one(msg)
    except (codec.CodecError, TypeError, ValueError) as exc:
        raise QueueingError from exc
    try:
        return bool(
            sql.write(
                connection,
                f"UPDATE {sql.quoted(connection, sql.TABLE)} "
                "SET value = %s, signature = %s WHERE key = %s",
                (value, signature_of(msg.extra.get("LastError")), key),
            )
        )
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
    prefix = key.partition(keys.SEPARATOR)[0]
    if msg.queued_at is None:
        msg = msg.replace(queued_at=GoTime.now())
    try:
        value = codec.encode_one(msg)
    except (codec.CodecError, TypeError, ValueError) as exc:
        raise QueueingError from exc
    connection = sql.connection()
    try:
        with transaction.atomic(using=connection.alias):
            deleted = sql.write(connection, _delete_sql(connection), (key,))
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


def drop_msg(key: bytes, msg: Message | None, reason: str) -> bool:
    """Delete the row `key` because its message is thrown away; sends
    `message_dropped` with `reason` after the commit. False when the row was
    already gone. Raises `QueueingError`."""
    key = bytes(key)
    queue = keys.queue_of(key)
    connection = sql.connection()
    try:
        with transaction.atomic(using=connection.alias):
            deleted = sql.write(connection, _delete_sql(connection), (key,))
            if deleted:
                record_drop(connection, queue, reason)
    except DatabaseError as exc:
        logger.exception("drop failed queue=%s key=%s", queue, key.hex())
        raise QueueingError from exc
    if deleted:
        logger.info("dropped message queue=%s key=%s reason=%s", queue, key.hex(), reason)
        sql.after_commit(
            connection, signals.message_dropped, sender=queue, key=key, msg=msg, reason=reason
        )
    return bool(deleted)


def atomic() -> transaction.Atomic:
    """A transaction on the queue's database: claim a row and settle it in one."""
    return transaction.atomic(using=conf.DATABASE)


@contextlib.contextmanager
def claiming(
    queue: str, *, after: bytes | None = None, until: bytes | None = None
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
        yield claim_failed_msg(queue, after=after, until=until)


def claim_failed_msg(
    queue: str, *, after: bytes | None = None, until: bytes | None = None
) -> Queued | None:
    """Lock the oldest message of `queue` no other transaction holds, with
    `SELECT ... FOR UPDATE SKIP LOCKED`; call it inside a transaction (see
    `claiming`). Rows the rules rewrite or drop on the way are treated as by
    `iter_failed_msgs`, in the same transaction.
    """
    connection = sql.connection()
    if not connection.in_atomic_block:
        raise transaction.TransactionManagementError("claim_failed_msg needs a transaction")
    if not can_claim_rows():
        raise NotSupportedError(f"{connection.vendor} cannot skip locked rows")
    low, high = keys.queue_bounds(queue)
    table = sql.quoted(connection, sql.TABLE)
    lock = connection.ops.for_update_sql(skip_locked=True)
    bound, inclusive = (after, False) if after is not None else (low, True)
    rereads = 0
    while True:
        query = (
            f"SELECT key, value FROM {table} WHERE key {'>=' if inclusive else '>'} %s AND key < %s"
        )
        params: tuple[bytes, ...] = (bound, high)
        if until is not None:
            query += " AND key <= %s"
            params += (until,)
        with connection.cursor() as cursor:
            cursor.execute(f"{query} ORDER BY key LIMIT 1 {lock}", params)
            row = cursor.fetchone()
        if row is None:
            return None
        key, value = bytes(row[0]), bytes(row[1]) if row[1] is not None else b""
        outcome = _process_row(connection, queue, low, key, value)
        if isinstance(outcome, Queued):
            return outcome
        if outcome is _REREAD and rereads < _REREAD_LIMIT:
            rereads += 1
            bound, inclusive = key, True
            continue
        rereads = 0
        bound, inclusive = key, False


def fetch_msg(key: bytes) -> Queued | None:
    """The message of the one row `key`, the rules of `iter_failed_msgs` applied
    (a zero `queued_at` stamped, an expired message or a corrupt row dropped, a
    multi-message row split with its first message keeping the key); None when
    there is nothing to hand over. Inside a transaction on a database that
    `can_claim_rows`, the row is locked `FOR UPDATE SKIP LOCKED`, and None also
    means another drain holds it. Never raises for database or data problems.
    """
    key = bytes(key)
    connection = sql.connection()
    table = sql.quoted(connection, sql.TABLE)
    lock = ""
    if connection.in_atomic_block and can_claim_rows():
        lock = " " + connection.ops.for_update_sql(skip_locked=True)
    name = keys.queue_of(key)
    prefix = key.partition(keys.SEPARATOR)[0]
    for _ in range(_REREAD_LIMIT):
        try:
            with connection.cursor() as cursor:
                cursor.execute(f"SELECT key, value FROM {table} WHERE key = %s{lock}", (key,))
                row = cursor.fetchone()
        except DatabaseError:
            logger.exception("fetch failed key=%s", key.hex())
            return None
        if row is None:
            return None
        value = bytes(row[1]) if row[1] is not None else b""
        outcome = _process_row(connection, name, prefix, key, value)
        if isinstance(outcome, Queued):
            return outcome
        if outcome is not _REREAD:
            return None
    return None


def preview_failed_msgs(queue: str, batch_size: int = 1000) -> Iterator[Preview]:
    """Every message of `queue` oldest first with what a drain would do to it,
    read only: no row is split, stamped or deleted (for `--dry-run`)."""
    low, high = keys.queue_bounds(queue)
    max_age_ns = _max_age_ns()
    rows = sql.iter_range(sql.connection(), sql.TABLE, low, high, batch_size)
    for key, value in rows:
        try:
            msgs = codec.decode(value)
        except codec.CodecError:
            yield Preview(key, None, "corrupt")
            continue
        cutoff = time.time_ns() - max_age_ns
        for msg in msgs:
            expired = msg.queued_at is not None and msg.queued_at.unix_ns < cutoff
            yield Preview(key, msg, "expired" if expired else "deliver")


def queue_names() -> list[str]:
    """The name of every queue that holds a row, in key order: one index seek a queue."""
    connection = sql.connection()
    try:
        heads = list(iter_queue_heads(connection, sql.TABLE))
    except DatabaseError:
        logger.exception("listing queues failed")
        return []
    return [keys.queue_of(head) for head in heads]


# --- async twins -----------------------------------------------------------


async def astore_failed_msgs(queue: str, msg: Message) -> bytes:
    return await sync_to_async(store_failed_msgs)(queue, msg)


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
