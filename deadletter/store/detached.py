"""Parking that outlives the caller's transaction.

A dead-letter queue is written to exactly when something failed, often
inside a transaction that is about to roll back (an `ATOMIC_REQUESTS` view
that parks a message and re-raises). So a store never rides on the caller's
transaction; `route` says where it goes instead. The caller's transaction is
an atomic block or a manual one (`set_autocommit(False)`) alike.

- `DIRECT`: the queue's connection is in no transaction of the caller's
  (autocommit, or only a test case's own transaction, which stands for
  autocommit): the INSERT runs on it and commits at once.
- `PRIVATE` (PostgreSQL or MySQL/MariaDB inside the caller's transaction): the
  INSERT runs on a second connection of this thread to the same database, in
  autocommit (the caller's row locks cannot block a fresh row's INSERT).
- `DEFERRED` (SQLite inside the caller's transaction, where a second
  connection would wait for the write lock the caller holds; or a caller's
  block inside a test case's transaction): the record is appended to a spool
  file and fsynced (`deadletter.store.spool`), and the row is written the moment the
  caller's transaction ends, committed or rolled back, or its connection is
  closed. If that write fails, the spool file keeps the message for the next
  store, fetch or drain, in this process or any other.

The end of the caller's transaction is seen by wrapping methods of that
connection object (`commit` and `rollback`, which end a manual transaction
and the outermost atomic block; `set_autocommit`, `savepoint_commit`, and
`close`): Django has no rollback hook.
"""

from __future__ import annotations

import atexit
import enum
import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from django.core.signals import request_finished
from django.db import DatabaseError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter.store import spool
from deadletter.store.transactions import transaction_on

logger = logging.getLogger("deadletter")

Write = Callable[[BaseDatabaseWrapper], object]
"""A deferred write: run it on the connection given, raise if it did not happen."""


class Route(enum.Enum):
    DIRECT = "direct"
    PRIVATE = "private"
    DEFERRED = "deferred"


_PENDING = "_deadletter_pending"
_HOOKED = "_deadletter_hooked"
_FLUSHING = "_deadletter_flushing"
_SPOOL = "_deadletter_spool"
SETTLE_EVERY = 1.0

_local = threading.local()
_with_pending: weakref.WeakSet[BaseDatabaseWrapper] = weakref.WeakSet()


def route(connection: BaseDatabaseWrapper) -> Route:
    """Where a store on `connection` (the alias's own, from `connections`) goes so
    that it commits on its own.

    Connects when not connected yet: the driver's autocommit is known only then.
    """
    if not connection.in_atomic_block:
        if connection.get_autocommit():
            return Route.DIRECT
        _install_hooks(connection)
        return Route.DEFERRED if connection.vendor == "sqlite" else Route.PRIVATE
    if _test_case_block(connection, -1):
        return Route.DIRECT
    _install_hooks(connection)
    if connection.vendor != "sqlite" and not _test_case_block(connection, 0):
        return Route.PRIVATE
    return Route.DEFERRED


def in_callers_transaction(connection: BaseDatabaseWrapper) -> bool:
    """Whether `connection` is inside a transaction of the caller's: an atomic
    block (a test case's own blocks stand for autocommit and do not count) or a
    manual one."""
    if not connection.in_atomic_block:
        return connection.connection is not None and not connection.get_autocommit()
    return not _test_case_block(connection, -1)


def _test_case_block(connection: BaseDatabaseWrapper, index: int) -> bool:
    """Whether the atomic block `connection.atomic_blocks[index]` is a test case's
    own (Django's `TestCase` wraps each test in blocks that roll back at its end).

    Asked of Django's own rule: a durable block cannot open inside another atomic
    block, unless that block, the innermost, is a test case's. A probe without a
    savepoint sends nothing to the database; for a block other than the innermost,
    the blocks inside it are set aside while the rule is asked.
    """
    blocks = connection.atomic_blocks
    inner = blocks[index + 1 :] if index >= 0 else []
    del blocks[len(blocks) - len(inner) :]
    try:
        with transaction.atomic(using=connection.alias, savepoint=False, durable=True):
            return True
    except RuntimeError:
        return False
    finally:
        blocks.extend(inner)


def private_connection(connection: BaseDatabaseWrapper) -> BaseDatabaseWrapper:
    """This thread's second connection to `connection`'s database, in autocommit.

    A copy of the alias's `DatabaseWrapper`, so its statements go through
    Django's cursor wrapper (and the caller's execute wrappers). Kept for the
    next store (a connect costs more than the INSERT); closed with the
    caller's connection, and at the end of a request as Django closes its own
    (`CONN_MAX_AGE`).
    """
    wrappers: dict[str, BaseDatabaseWrapper] = _local.__dict__.setdefault("wrappers", {})
    private = wrappers.get(connection.alias)
    if private is None or private.settings_dict is not connection.settings_dict:
        if private is not None:
            private.close()
        private = wrappers[connection.alias] = connections.create_connection(connection.alias)
    private.execute_wrappers = list(connection.execute_wrappers)
    if not private.get_autocommit():  # a project with AUTOCOMMIT off
        private.set_autocommit(True)
    return private


def close_private_connections(**kwargs: Any) -> None:
    """Close this thread's second connections that Django would close (unusable,
    or older than `CONN_MAX_AGE`); at the end of each request."""
    for private in _local.__dict__.get("wrappers", {}).values():
        private.close_if_unusable_or_obsolete()


request_finished.connect(close_private_connections, dispatch_uid="deadletter.store.detached")


def defer(connection: BaseDatabaseWrapper, write: Write, records: Sequence[spool.Record]) -> None:
    """Run `write` once the caller's transaction on `connection` ends, however it
    ends; on a SQLite file its `(queue, key, value)` records are first made
    durable in the spool, all of them as one (an `OSError` if they cannot be, and
    nothing is kept). `write` puts them all in the table in one transaction."""
    folder = spool.directory(connection)
    if folder is not None:
        spooled: spool.SpoolFile | None = connection.__dict__.get(_SPOOL)
        if spooled is None:
            spooled = connection.__dict__[_SPOOL] = spool.SpoolFile(folder)
        spooled.append_many(records)
    pending: list[Write] = connection.__dict__.setdefault(_PENDING, [])
    pending.append(write)
    _with_pending.add(connection)


def settle(connection: BaseDatabaseWrapper) -> None:
    """Before a store, fetch or drain on `connection`: write what an earlier
    transaction's end could not, and what a dead process left in the spool.
    Only outside the caller's transaction, whose lock the writes would need.
    Never raises: what cannot be written now is tried again next time."""
    if connection.in_atomic_block:
        return
    try:
        if connection.connection is None:
            connection.ensure_connection()  # the driver's autocommit is known only then
    except DatabaseError:
        return  # the caller's own statement reports the database
    if not connection.autocommit:
        return
    if connection.__dict__.get(_PENDING):
        _transaction_ended(connection)
    if connection.vendor == "sqlite":
        spool.recover(connection)


_settle_after = [0.0]


def settle_now_and_then(connection: BaseDatabaseWrapper) -> None:
    """`settle` for the store path: at once when this connection holds writes
    an earlier transaction's end could not make, else at most once a second."""
    now = time.monotonic()
    if now < _settle_after[0] and not connection.__dict__.get(_PENDING):
        return
    _settle_after[0] = now + SETTLE_EVERY
    settle(connection)


def _install_hooks(connection: BaseDatabaseWrapper) -> None:
    if connection.__dict__.get(_HOOKED):
        return
    set_autocommit = connection.set_autocommit
    savepoint_commit = connection.savepoint_commit
    commit = connection.commit
    rollback = connection.rollback
    close = connection.close
    ref = weakref.ref(connection)

    def hooked_commit() -> None:
        commit()
        this = ref()
        if this is not None and not this.in_atomic_block:
            _transaction_ended(this, manual=True)

    def hooked_rollback() -> None:
        rollback()
        this = ref()
        if this is not None and not this.in_atomic_block:
            _transaction_ended(this, manual=True)

    def hooked_set_autocommit(autocommit: bool, *args: Any, **kwargs: Any) -> None:
        set_autocommit(autocommit, *args, **kwargs)
        this = ref()
        if this is not None and autocommit and not this.in_atomic_block:
            _transaction_ended(this)

    def hooked_savepoint_commit(sid: str) -> None:
        savepoint_commit(sid)
        this = ref()
        if this is not None and not in_callers_transaction(this):
            _transaction_ended(this)

    def hooked_close() -> None:
        close()
        this = ref()
        if this is not None:
            _transaction_ended(this, closed=True)

    connection.set_autocommit = hooked_set_autocommit  # type: ignore[method-assign]
    connection.savepoint_commit = hooked_savepoint_commit  # type: ignore[method-assign]
    connection.commit = hooked_commit  # type: ignore[method-assign]
    connection.rollback = hooked_rollback  # type: ignore[method-assign]
    connection.close = hooked_close  # type: ignore[method-assign]
    connection.__dict__[_HOOKED] = True


def _transaction_ended(
    connection: BaseDatabaseWrapper, *, closed: bool = False, manual: bool = False
) -> None:
    """Run the deferred writes: on the connection itself, or on the private one
    when it was closed (the database rolled back by itself; the private one then
    goes with it: it lives no longer than its caller's) or when the caller's
    connection is still in manual mode (`manual`), where a write would open
    the caller's next transaction."""
    if connection.__dict__.get(_FLUSHING):
        return
    connection.__dict__[_FLUSHING] = True
    try:
        if connection.__dict__.get(_PENDING):
            via = private_connection(connection) if closed or manual else connection
            _flush(connection, via)
        if closed:
            private = _local.__dict__.get("wrappers", {}).get(connection.alias)
            if private is not None and private is not connection:
                private.close()
    finally:
        connection.__dict__[_FLUSHING] = False


def _flush(connection: BaseDatabaseWrapper, via: BaseDatabaseWrapper) -> None:
    """Write every pending message on `via`, in one transaction when there are
    several (one commit, not one each); on failure they all stay pending."""
    pending: list[Write] = connection.__dict__[_PENDING]
    if not pending:
        return
    try:
        if len(pending) == 1:
            pending[0](via)
        else:
            with transaction.atomic(using=via.alias) if via is connection else transaction_on(via):
                for write in pending:
                    write(via)
    except Exception:
        spooled = connection.__dict__.get(_SPOOL)
        logger.exception(
            "parked messages not written after the caller's transaction ended; "
            "kept in %s for the next store, fetch or drain (pending=%d)",
            spooled.path if spooled is not None else "memory only (no spool file)",
            len(pending),
        )
        return
    pending.clear()
    _with_pending.discard(connection)
    spooled = connection.__dict__.pop(_SPOOL, None)
    if spooled is not None:
        spooled.remove()


@atexit.register
def _flush_at_exit() -> None:
    """Last try for writes whose transaction never ended (a thread left mid-block);
    what fails here stays in its spool file (`_flush` says so) on SQLite."""
    for connection in list(_with_pending):
        pending = connection.__dict__.get(_PENDING) or []
        if not pending:
            continue
        try:
            via = connections.create_connection(connection.alias)
            try:
                _flush(connection, via)
            finally:
                via.close()
        except Exception:
            logger.exception("parked messages lost at exit (pending=%d)", len(pending))
