"""The queue table's SQL plumbing: the connection, the statement path (Django's
cursor, or the driver's when nothing watches), and signals sent once a row
change has committed.

Below `queue/`, above the models: nothing here knows the
queue's rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from django.db import DataError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from deadletter import signals
from deadletter.conf import conf
from deadletter.models import KEY_BYTES, QueuedMessage
from deadletter.wire import keys
from deadletter.wire.messages import Message

logger = logging.getLogger("deadletter")


def table() -> str:
    """The queue table's name, from the model (`QueuedMessage._meta.db_table`)."""
    return QueuedMessage._meta.db_table


_queue_table = table


def connection() -> BaseDatabaseWrapper:
    return connections[conf.DATABASE]


def quoted(connection: BaseDatabaseWrapper, table: str) -> str:
    return connection.ops.quote_name(table)


_statements: dict[tuple[Any, ...], str] = {}


def statement(
    connection: BaseDatabaseWrapper, template: str, *, table: str | None = None, **parts: object
) -> str:
    """`template` in this backend's SQL, made once per backend, table and parts: the
    one place where a statement's vendor spelling is decided.

    `{table}` is the quoted table (the queue table unless `table` names another),
    `{key}` the quoted key column (`KEY` is a reserved word on MySQL),
    `{skip_duplicate}` the clause that makes an INSERT leave a present key alone,
    `{for_update}` a row lock where the backend has row locks (SQLite locks the
    whole file: `take_write_lock`), `{by_due}` after the table where a count must
    read the (due_at, key) index alone; `parts` fill the template's other fields.
    """
    table_name = table or _queue_table()
    cache_key: tuple[Any, ...] = (connection.vendor, table_name, template)
    if parts:
        cache_key += tuple(sorted(parts.items()))
    made = _statements.get(cache_key)
    if made is None:
        made = _statements[cache_key] = template.format(
            table=quoted(connection, table_name), **_vendor_parts(connection), **parts
        )
    return made


def _vendor_parts(connection: BaseDatabaseWrapper) -> dict[str, str]:
    key = key_column(connection)
    if connection.vendor == "mysql":
        # Not INSERT IGNORE: that would also turn a value that does not fit into a
        # warning and a cut row.
        skip = f" ON DUPLICATE KEY UPDATE {key} = {key}"
    else:
        skip = " ON CONFLICT DO NOTHING"
    return {
        "key": key,
        "skip_duplicate": skip,
        "for_update": "" if connection.vendor == "sqlite" else " FOR UPDATE",
        # SQLite's planner takes the key's index for a key range with a due_at
        # bound, and reads every row for its due_at; the (due_at, key) index
        # answers from itself.
        "by_due": " INDEXED BY deadletter_due_key" if connection.vendor == "sqlite" else "",
    }


def key_column(connection: BaseDatabaseWrapper) -> str:
    """The key column's quoted name, for statements built around other parts."""
    return connection.ops.quote_name("key")


def refuse_long_keys(connection: BaseDatabaseWrapper, row_keys: Iterable[bytes]) -> None:
    """`DataError` for a key the key column cannot hold on this backend, before
    anything is sent: MySQL's `INSERT IGNORE` would store it cut short. SQLite
    and PostgreSQL take a key of any length (a Go file may hold one)."""
    if connection.vendor != "mysql":
        return
    for key in row_keys:
        if len(key) > KEY_BYTES:
            raise DataError(
                f"a key of {len(key)} bytes ({bytes(key)[:40]!r}...) is longer than the "
                f"{KEY_BYTES} bytes a key holds on MySQL/MariaDB (a queue name of at most "
                f"{keys.MAX_QUEUE_NAME_BYTES} bytes)"
            )


def insert_new(
    connection: BaseDatabaseWrapper,
    cursor: Any,
    table: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
) -> int:
    """Insert `rows` (the key first), leaving a key already present as it is; how
    many went in. The count needs `INSERT IGNORE` on MySQL, where an
    `ON DUPLICATE KEY UPDATE` that changes nothing counts as a row found."""
    if not rows:
        return 0
    names = ", ".join(connection.ops.quote_name(c) for c in columns)
    marks = ", ".join(["%s"] * len(columns))
    if connection.vendor == "mysql":
        refuse_long_keys(connection, (bytes(row[0]) for row in rows))
        template = "INSERT IGNORE INTO {table} ({names}) VALUES ({marks})"
    else:
        template = "INSERT INTO {table} ({names}) VALUES ({marks}) ON CONFLICT DO NOTHING"
    query = statement(connection, template, table=table, names=names, marks=marks)
    for row in rows:  # the driver sends a batch in statements of at most 64 KiB
        refuse_oversized(connection, query, row)
    cursor.executemany(query, rows)
    return max(cursor.rowcount, 0)


class PacketTooLarge(DataError):
    """A statement the MySQL/MariaDB server would refuse for its size: sending it
    would only drop the connection (the server closes it on an oversized packet)."""


# The bytes mysqlclient escapes with a backslash in a literal, each sent as two.
_ESCAPED = (b"\x00", b"\n", b"\r", b"\\", b"'", b'"', b"\x1a")
_PACKET_ATTR = "_deadletter_max_packet"
_SMALL_STATEMENT = 1 << 16  # far under any server's max_allowed_packet: not measured


def refuse_oversized(connection: BaseDatabaseWrapper, sql: str, params: Sequence[Any]) -> None:
    """`PacketTooLarge` for a statement over the MySQL/MariaDB server's
    `max_allowed_packet`, counted as the driver sends it (bytes escaped in a literal);
    nothing elsewhere, where a statement has no such bound."""
    if connection.vendor != "mysql":
        return
    blobs = [bytes(p) for p in params if isinstance(p, bytes | bytearray | memoryview)]
    raw = len(sql) + sum(len(b) for b in blobs)
    if raw < _SMALL_STATEMENT:
        return
    size = raw + sum(b.count(c) for b in blobs for c in _ESCAPED) + 16 * len(blobs)
    limit = max_packet(connection)
    if size > limit:
        raise PacketTooLarge(
            f"the statement would be {size:,} bytes, over the database server's "
            f"max_allowed_packet of {limit:,} bytes; raise max_allowed_packet on the server "
            "(and DEADLETTER_MAX_ROW_BYTES with it) or write a smaller message"
        )


def max_packet(connection: BaseDatabaseWrapper) -> int:
    """The server's `max_allowed_packet`, read once per database connection."""
    connection.ensure_connection()
    cached = connection.__dict__.get(_PACKET_ATTR)
    if cached is not None and cached[0] is connection.connection:
        return int(cached[1])
    with connection.cursor() as cursor:
        cursor.execute("SELECT @@max_allowed_packet")
        (limit,) = cursor.fetchone()
    connection.__dict__[_PACKET_ATTR] = (connection.connection, int(limit))
    return int(limit)


def take_write_lock(connection: BaseDatabaseWrapper, cursor: Any, table: str) -> None:
    """Inside a transaction, take SQLite's write lock now (a write that touches no
    row), so that what is read next cannot change before the commit; other backends
    lock the rows read with `{for_update}`."""
    if connection.vendor == "sqlite":
        cursor.execute(statement(connection, "DELETE FROM {table} WHERE 0", table=table))


def can_skip_locked(connection: BaseDatabaseWrapper) -> bool:
    """Whether several workers can claim rows of one queue at once here:
    `SELECT ... FOR UPDATE SKIP LOCKED` (PostgreSQL, MariaDB >= 10.6, MySQL >= 8.0.1)."""
    return connection.vendor != "sqlite" and connection.features.has_select_for_update_skip_locked


def write(connection: BaseDatabaseWrapper, sql: str, params: Any) -> int:
    """Run one write, in a savepoint when the caller holds a transaction so a
    failed statement does not poison it; in its own autocommit otherwise.
    `PacketTooLarge` before anything is sent for one the server would refuse.
    On the driver's cursor when `direct`, else on Django's."""
    if connection.vendor == "mysql":
        refuse_oversized(connection, sql, params)
    if connection.in_atomic_block:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.rowcount
    if not direct(connection):
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.rowcount
    cursor = _driver_cursor(connection)
    try:
        cursor.execute(_driver_sql(connection.vendor, sql), params)
        return int(cursor.rowcount)
    except Exception:
        with connection.wrap_database_errors:
            raise
    finally:
        _close(cursor)


def read(connection: BaseDatabaseWrapper, sql: str, params: Any) -> list[tuple[Any, ...]]:
    """All rows of one SELECT (a page of a scan is read whole, so no cursor stays
    open while the caller works); on the driver's cursor when `direct`."""
    if not direct(connection):
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())
    cursor = _driver_cursor(connection)
    try:
        cursor.execute(_driver_sql(connection.vendor, sql), params)
        rows = cursor.fetchall()
    except Exception:
        with connection.wrap_database_errors:
            raise
    finally:
        _close(cursor)
    return rows if type(rows) is list else list(rows)


def watched(connection: BaseDatabaseWrapper) -> bool:
    """Whether anything looks at this connection's statements: an `execute_wrapper`
    (APM hooks, tests), query logging (`queries_logged`: `force_debug_cursor` or
    `DEBUG`), a `cursor` of its own set on the connection (django-debug-toolbar's
    and ddtrace's way), or a patch of `CursorWrapper.execute` (Sentry's way)."""
    execute = CursorWrapper.execute
    return bool(
        connection.execute_wrappers
        or connection.queries_logged
        or "cursor" in vars(connection)
        or execute.__module__ != _DJANGO_CURSORS
        or hasattr(execute, "__wrapped__")
    )


_DJANGO_CURSORS = CursorWrapper.__module__


def direct(connection: BaseDatabaseWrapper) -> bool:
    """Whether a statement outside any atomic block may skip Django's cursor wrapper
    for the driver's own cursor: nothing watches (`watched`), no event loop runs in
    this thread, and the connection is open once Django's health check (due once a
    request, with `CONN_HEALTH_CHECKS`) has run. Otherwise Django's cursor does
    what is due: it connects, or refuses (`SynchronousOnlyOperation`)."""
    if watched(connection) or _loop_running():
        return False
    connection.close_if_health_check_failed()
    return connection.connection is not None


def _driver_cursor(connection: BaseDatabaseWrapper) -> Any:
    """The driver's cursor as the backend makes it for Django's (`create_cursor`:
    MySQL's maps a few errors to `IntegrityError`, PostgreSQL's sets the time zone);
    on SQLite the driver's own, given `?` placeholders (`_driver_sql`) instead of
    Django's rewriting of every statement. Without Django's thread check: every
    connection a statement runs on is this thread's own (`connections[alias]`,
    or the private one `detached` makes in this thread)."""
    try:
        if connection.vendor == "sqlite":
            return connection.connection.cursor()
        return connection.create_cursor()
    except Exception:
        with connection.wrap_database_errors:  # a closed connection: Django's error
            raise


_driver_forms: dict[str, str] = {}
_FORMAT_MARK = re.compile(r"(?<!%)%s")


def _driver_sql(vendor: str, sql: str) -> str:
    """`sql` with sqlite3's `?` placeholders on SQLite, as Django's SQLite cursor
    rewrites it, made once per statement; as it is elsewhere."""
    if vendor != "sqlite":
        return sql
    form = _driver_forms.get(sql)
    if form is None:
        if len(_driver_forms) >= 256:
            _driver_forms.clear()
        form = _driver_forms[sql] = _FORMAT_MARK.sub("?", sql).replace("%%", "%")
    return form


def _loop_running() -> bool:
    """Whether an event loop runs in this thread, where Django refuses a cursor.
    Asked of `get_running_loop` only where a loop may run: asyncio's loops (and
    uvloop's) set this thread's async generator hooks while they run, and reading
    those costs a fifth of the exception `get_running_loop` raises outside one."""
    if sys.get_asyncgen_hooks().firstiter is None:
        return False
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _close(cursor: Any) -> None:
    """Close a driver cursor whatever state its connection is in: on a connection gone,
    MySQLdb's `close` raises too, which would hide the statement's own error. Not
    `contextlib.suppress`, which would cost a statement's Python side a tenth more."""
    try:
        cursor.close()
    except Exception:
        return


def after_commit(connection: BaseDatabaseWrapper, signal: Any, **kwargs: Any) -> None:
    """Send `signal` once the current transaction commits (at once in autocommit)."""
    if not signal.receivers:
        return  # the common case on the hot paths: nothing to defer

    def send() -> None:
        for receiver, result in signal.send_robust(**kwargs):
            if isinstance(result, Exception):
                logger.error("signal receiver failed receiver=%r error=%r", receiver, result)

    connection.on_commit(send)  # this connection's commit, also a private one's


def dropped(
    connection: BaseDatabaseWrapper, queue: str, key: bytes, msg: Message | None, reason: str
) -> None:
    """`message_dropped` once the row change that dropped `msg` has committed."""
    after_commit(connection, signals.message_dropped, sender=queue, key=key, msg=msg, reason=reason)


class Conflict(Exception):
    """The row changed between read and write: another reader got there first."""


def range_sql(
    connection: BaseDatabaseWrapper,
    table: str,
    inclusive: bool,
    limit: int,
    *,
    due_now: bool = False,
) -> str:
    """A page of a key range in key order, from a key on (included or not): the one
    read every scan of the table uses. Parameters: the first key and the range's end.
    With `due_now`, only rows no backoff holds back (`due_at` NULL), by the
    (due_at, key) index, so a drain never reads the rows that wait."""
    cache_key = (connection.vendor, table, inclusive, limit, due_now)
    made = _ranges.get(cache_key)
    if made is None:
        if len(_ranges) >= 256:
            _ranges.clear()
        made = _ranges[cache_key] = statement(
            connection,
            "SELECT {key}, value FROM {table} WHERE {due}{key} {op} %s AND {key} < %s "
            "ORDER BY {key} LIMIT {limit}",
            table=table,
            op=">=" if inclusive else ">",
            limit=int(limit),
            due="due_at IS NULL AND " if due_now else "",
        )
    return made


_ranges: dict[tuple[Any, ...], str] = {}


def claim_sql(
    connection: BaseDatabaseWrapper,
    table: str,
    *,
    inclusive: bool,
    until: bool,
    due_now: bool,
) -> str:
    """The claim: the first row of a key range from a key on (included or not), up to
    a last key (included) when `until`, that no other transaction holds, locked
    `FOR UPDATE SKIP LOCKED` (`can_skip_locked`). Parameters: the first key, the
    range's end, and the last key when `until`. With `due_now`, only a row no
    backoff holds back. One statement the driver runs as it is, where building the
    same query through the ORM cost more than the database's answer."""
    key = key_column(connection)
    return statement(
        connection,
        "SELECT {key}, value FROM {table} WHERE {due}{key} {op} %s AND {key} < %s{last} "
        "ORDER BY {key} LIMIT 1{for_update} SKIP LOCKED",
        table=table,
        op=">=" if inclusive else ">",
        last=f" AND {key} <= %s" if until else "",
        due="due_at IS NULL AND " if due_now else "",
    )


class KeyPages:
    """The one key-range page loop: pages of `[low, high)` in key order, each read
    whole by `read(inclusive, after, high)` as `ORDER BY key LIMIT size` after the last
    key seen, so no cursor or transaction stays open between pages.

    `restart_at(key)` makes the next page start at `key` again (included): a
    reader that rewrote a row reads it anew. Used by the queue's scan, the
    legacy fold, the kv file's reads and `iter_range`.
    """

    def __init__(
        self,
        read: Callable[[bool, bytes, bytes], Sequence[Sequence[Any]]],
        low: bytes,
        high: bytes,
        size: int,
    ) -> None:
        self._read = read
        self._next: tuple[bytes, bool] | None = (low, True)
        self._high = high
        self._size = size

    def restart_at(self, key: bytes) -> None:
        self._next = (key, True)

    def __iter__(self) -> Iterator[Sequence[Sequence[Any]]]:
        while self._next is not None:
            after, inclusive = self._next
            rows = self._read(inclusive, after, self._high)
            self._next = (bytes(rows[-1][0]), False) if len(rows) >= self._size else None
            yield rows


def iter_range(
    connection: BaseDatabaseWrapper, table: str, low: bytes, high: bytes, page: int = 1000
) -> Iterator[tuple[bytes, bytes]]:
    """Every `(key, value)` in `[low, high)` in key order, a page at a time
    (`KeyPages`); a NULL value reads as empty."""

    def read(inclusive: bool, after: bytes, high: bytes) -> list[tuple[Any, ...]]:
        with connection.cursor() as cursor:
            cursor.execute(range_sql(connection, table, inclusive, page), (after, high))
            return cursor.fetchall()

    for rows in KeyPages(read, low, high, page):
        for k, v in rows:
            yield bytes(k), bytes(v) if v is not None else b""


@contextlib.contextmanager
def sqlite_pragma(
    connection: BaseDatabaseWrapper, name: str, value: str, *, restore: Callable[[int], str] = str
) -> Iterator[None]:
    """`PRAGMA name = value` on SQLite for the block, the connection's own value put
    back after (`restore` spells it, where the value reads back as a number that
    does not set it); elsewhere nothing."""
    if connection.vendor != "sqlite":
        yield
        return
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute(f"PRAGMA {name}")
        row = cursor.fetchone()
        previous = int(row[0]) if row else 0
        cursor.execute(f"PRAGMA {name} = {value}")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"PRAGMA {name} = {restore(previous)}")
