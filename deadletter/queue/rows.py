"""The row rules a read applies (docs/design.md, "The queue API"): a corrupt row is
dropped, an expired message dropped, a zero `queued_at` stamped, a legacy or
multi-message row split so every message has its own key; and how a row is
written. Every rewrite is conditional on the row still holding the bytes read.

What a rule drops is told to the caller (`on_drop`, a `Dropped` with its
`DropReason`) and to `message_dropped`, both once the change has committed,
and counted (`counters.record_drop`) and archived (`archive_write.archive_rows`,
actor `drain`) in the transaction that deletes it.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from django.db import DatabaseError, IntegrityError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter.conf import conf
from deadletter.exceptions import DeadletterError
from deadletter.queue import age, archive_write
from deadletter.queue.legacy import split_legacy_row
from deadletter.store import sql
from deadletter.store.counters import record_drop
from deadletter.wire import codec, keys
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message

logger = logging.getLogger("deadletter")

ATTEMPTS_KEY = "Attempts"
LAST_ERROR_KEY = "LastError"
"""The `extra` keys the drain records a failed delivery under (Go-style names)."""

_INSERT_ATTEMPTS = 5
REREAD_LIMIT = 5


class QueueingError(DeadletterError):
    """A message could not be written to the queue; the cause is chained.

    The text starts with the Go package's `ErrQueueing`, "problem with persistent
    queue" (docs/design.md, "The queue API"), and then says what went wrong: the
    message given, else the chained cause.
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

    A named tuple: a scan builds one per message, and a frozen dataclass costs more.
    """

    key: bytes
    msg: Message

    @property
    def attempts(self) -> int:
        """How many deliveries the drain has tried and seen fail; 0 when never tried
        (or when the count is corrupt: the drain counts on from 0)."""
        return attempts_of(self.msg.extra) or 0

    @property
    def last_error(self) -> str | None:
        """The last failed delivery's error as `ExcClass: message`; None when never tried."""
        value = self.msg.extra.get(LAST_ERROR_KEY)
        return value if isinstance(value, str) and value else None


def attempts_of(extra: Mapping[str, Any]) -> int | None:
    """The one reading of `Attempts`: the failed deliveries so far, 0 when the key
    is absent, None when its value is no count (negative, a bool, not an int),
    which a page shows as corrupt and never as a number."""
    value = extra.get(ATTEMPTS_KEY, 0)
    if type(value) is int and value >= 0:
        return value
    return None


class DropReason(enum.StrEnum):
    """Why a message was thrown away (the `reason` of `message_dropped` and the drop counters)."""

    EXPIRED = "expired"
    CORRUPT = "corrupt"
    PERMANENT = "permanent"
    MAX_ATTEMPTS = "max_attempts"


class Dropped(NamedTuple):
    """A message (None for a corrupt row) the queue threw away, and why."""

    queue: str
    key: bytes
    msg: Message | None
    reason: DropReason


OnDrop = Callable[[Dropped], None]


def report_drop(
    connection: BaseDatabaseWrapper,
    queue: str,
    key: bytes,
    msg: Message | None,
    reason: DropReason,
    on_drop: OnDrop | None = None,
) -> None:
    """Tell `on_drop` and `message_dropped` once the change that dropped `msg` has committed."""
    sql.dropped(connection, queue, key, msg, str(reason))
    if on_drop is not None:
        dropped = Dropped(queue, key, msg, reason)
        connection.on_commit(lambda: on_drop(dropped))


# --- writing a row ---------------------------------------------------------------


def insert_value(
    connection: BaseDatabaseWrapper,
    prefix: bytes,
    value: bytes,
    *,
    queue: str,
    key: bytes | None = None,
    signature: str | None = None,
) -> bytes:
    """Insert an encoded row under `key` (a fresh one when None), retrying a key
    collision with a new key; with `signature`, the row's cause
    (`causes.signature_at_park`) is written in the same statement."""
    if signature is None:
        query = sql.statement(connection, "INSERT INTO {table} ({key}, value) VALUES (%s, %s)")
        params: tuple[Any, ...] = (value,)
    else:
        query = sql.statement(
            connection, "INSERT INTO {table} ({key}, value, signature) VALUES (%s, %s, %s)"
        )
        params = (value, signature)
    for _ in range(_INSERT_ATTEMPTS):
        if key is None:
            key = keys.new_key(prefix)
        try:
            sql.write(connection, query, (key, *params))
        except IntegrityError:
            logger.warning("store key collision queue=%s key=%s", queue, key.hex())
            key = None
            continue
        except DatabaseError as exc:
            logger.exception("store failed queue=%s", queue)
            raise QueueingError from exc
        return key
    raise QueueingError(f"no free key after {_INSERT_ATTEMPTS} attempts")


def delete_sql(connection: BaseDatabaseWrapper) -> str:
    return sql.statement(connection, "DELETE FROM {table} WHERE {key} = %s")


# --- the rules -------------------------------------------------------------------


REREAD = object()
"""`process_row`: the row was rewritten (split, stamped); read it again."""
SKIP = object()
"""`process_row`: nothing to hand out from this row."""


def common_message(key: bytes, value: bytes, cutoff: int, max_row_bytes: int) -> Message | None:
    """The message of the common row (a key with its separator, a value within
    `max_row_bytes` holding one stamped message live at `cutoff`), read with no
    rule applied; None for every other row, which `process_row` must see."""
    if keys.NUL not in key or len(value) > max_row_bytes:
        return None
    try:
        msg = codec.decode_single(value)
    except codec.CodecError:
        return None
    if msg is None or msg.queued_at is None or age.expired(msg.queued_at, cutoff):
        return None
    return msg


def common_messages(
    rows: Sequence[Sequence[Any]], start: int, cutoff: int, max_row_bytes: int
) -> tuple[list[Queued], int]:
    """The common rows (`common_message`) from `rows[start]` on, as `Queued`, at most
    `COMMON_RUN` of them, up to the first row that may not be one; and the index
    of the row to look at next. An empty list: `rows[start]` goes to
    `common_message` and then, if need be, `process_row`. Read in C when the
    speed-up is there.

    A few dozen at a time, not a whole page, so that a scan hands each message
    on before the next are made: messages held unread would outlive Python's
    youngest garbage collection and be scanned again in the older ones."""
    stop = min(start + COMMON_RUN, len(rows))
    read = codec.read_rows
    if read is not None:
        return read(rows, start, stop, cutoff, max_row_bytes, Queued)
    found: list[Queued] = []
    for index in range(start, stop):
        key, value = rows[index]
        msg = common_message(key, value, cutoff, max_row_bytes)
        if msg is None:
            return found, index
        found.append(tuple.__new__(Queued, (key, msg)))
    return found, stop


COMMON_RUN = 32


def read_row(
    connection: BaseDatabaseWrapper,
    queue: str,
    prefix: bytes,
    key: bytes,
    value: bytes,
    *,
    cutoff: int,
    max_row_bytes: int,
    max_age_ns: int | None = None,
    on_drop: OnDrop | None = None,
) -> Queued | object:
    """One row as every scan and claim reads it: its message at once when the
    row is the common kind (`common_message`), else the rules applied
    (`process_row`): a `Queued` to hand out, `SKIP` or `REREAD`."""
    msg = common_message(key, value, cutoff, max_row_bytes)
    if msg is not None:
        return tuple.__new__(Queued, (key, msg))
    return process_row(
        connection, queue, prefix, key, value, max_age_ns=max_age_ns, on_drop=on_drop
    )


class Rereads:
    """How often a scan read each row again after the rules rewrote it
    (`REREAD`): `REREAD_LIMIT` times a row at most, so a row rewritten under
    every read cannot hold the scan forever."""

    __slots__ = ("_counts",)

    def __init__(self) -> None:
        self._counts: dict[bytes, int] = {}

    def again(self, key: bytes) -> bool:
        """Whether `key`, just rewritten, may be read once more."""
        count = self._counts[key] = self._counts.get(key, 0) + 1
        return count <= REREAD_LIMIT


def process_row(
    connection: BaseDatabaseWrapper,
    queue: str,
    prefix: bytes,
    key: bytes,
    value: bytes,
    *,
    max_age_ns: int | None = None,
    on_drop: OnDrop | None = None,
) -> Queued | object:
    """Apply the row rules (docs/design.md) to one row: a `Queued` to hand out, `SKIP` or `REREAD`.

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
        return SKIP
    table = sql.table()
    now_ns = time.time_ns()
    if max_age_ns is None:
        max_age_ns = age.max_age_ns(queue)
    if keys.is_legacy_key(key):
        try:
            split_legacy_row(
                connection,
                table,
                prefix,
                value,
                now_ns=now_ns,
                max_age_ns=max_age_ns,
                on_expired=lambda msg: report_drop(
                    connection, queue, prefix, msg, DropReason.EXPIRED, on_drop
                ),
            )
        except codec.CodecError as exc:
            logger.error("dropping corrupt legacy row queue=%s error=%s", queue, exc)
            if _safe_delete(connection, table, key, value, queue, DropReason.CORRUPT):
                report_drop(connection, queue, key, None, DropReason.CORRUPT, on_drop)
            return SKIP
        except sql.Conflict:
            pass
        except DatabaseError:
            logger.exception("legacy split failed queue=%s", queue)
            return SKIP
        return REREAD
    try:
        msgs = codec.decode(value)
    except codec.CodecError as exc:
        logger.error("dropping corrupt row queue=%s key=%s error=%s", queue, key.hex(), exc)
        if _safe_delete(connection, table, key, value, queue, DropReason.CORRUPT):
            report_drop(connection, queue, key, None, DropReason.CORRUPT, on_drop)
        return SKIP
    live, expired, changed = _apply_age_rules(queue, key, msgs, now_ns, max_age_ns)
    if not changed and len(live) == 1:
        return Queued(key, live[0])
    if not live:
        if _safe_delete(connection, table, key, value, queue, DropReason.EXPIRED, len(expired)):
            for msg in expired:
                report_drop(connection, queue, key, msg, DropReason.EXPIRED, on_drop)
        return SKIP
    try:
        with transaction.atomic(using=connection.alias):
            _rewrite_row(connection, table, prefix, key, value, live, queue)
            record_drop(connection, queue, DropReason.EXPIRED, len(expired))
            if archive_write.enabled(queue):
                archive_write.archive_rows(
                    connection,
                    queue,
                    [(key, codec.encode_one(msg)) for msg in expired],
                    DropReason.EXPIRED,
                    archive_write.ACTOR_DRAIN,
                )
    except sql.Conflict:
        return REREAD
    except DatabaseError:
        logger.exception("rewrite failed queue=%s key=%s", queue, key.hex())
        return SKIP
    for msg in expired:
        report_drop(connection, queue, key, msg, DropReason.EXPIRED, on_drop)
    return REREAD


def _apply_age_rules(
    queue: str, key: bytes, msgs: list[Message], now_ns: int, max_age_ns: int
) -> tuple[list[Message], list[Message], bool]:
    """Split off expired messages, stamp zero `queued_at`: (live, expired, changed)."""
    cutoff = age.cutoff_ns(now_ns, max_age_ns)
    live: list[Message] = []
    expired: list[Message] = []
    changed = False
    for msg in msgs:
        if msg.queued_at is None:
            msg = msg.replace(queued_at=GoTime(now_ns))
            changed = True
        elif age.expired(msg.queued_at, cutoff):
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


def _safe_delete(
    connection: BaseDatabaseWrapper,
    table: str,
    key: bytes,
    value: bytes,
    queue: str,
    reason: DropReason,
    dropped: int = 1,
) -> bool:
    """Delete a dropped row, if it still holds `value`, count the drop
    (`counters.record_drop`) and archive the row as it was, in one transaction."""
    try:
        with transaction.atomic(using=connection.alias):
            deleted = bool(
                sql.write(
                    connection,
                    sql.statement(
                        connection,
                        "DELETE FROM {table} WHERE {key} = %s AND value = %s",
                        table=table,
                    ),
                    (key, value),
                )
            )
            if deleted:
                record_drop(connection, queue, reason, dropped)
                archive_write.archive_rows(
                    connection, queue, [(key, value)], reason, archive_write.ACTOR_DRAIN
                )
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
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        cursor.execute(
            sql.statement(
                connection,
                "UPDATE {table} SET value = %s, search_pending = 1 WHERE {key} = %s AND value = %s",
                table=table,
            ),
            (codec.encode_one(live[0]), key, old_value),
        )
        if cursor.rowcount != 1:
            raise sql.Conflict
        rest = live[1:]
        if not rest:
            return
        cursor.execute(
            sql.statement(
                connection,
                "SELECT {key} FROM {table} WHERE {key} > %s AND {key} < %s ORDER BY {key} LIMIT 1",
                table=table,
            ),
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
                    sql.statement(
                        connection,
                        "INSERT INTO {table} ({key}, value) VALUES (%s, %s)",
                        table=table,
                    ),
                    [(k, codec.encode_one(m)) for k, m in zip(new_keys, rest, strict=True)],
                )
        except IntegrityError as exc:
            raise sql.Conflict from exc
