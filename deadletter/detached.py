"""Parking that outlives the caller's transaction.

A dead-letter queue is written to exactly when something failed, often
inside a transaction that is about to roll back (an `ATOMIC_REQUESTS` view
that parks a message and re-raises). So a store never rides on the caller's
transaction; `route` says where it goes instead:

- `DIRECT`: the queue's connection is in no transaction of the caller's
  (autocommit, or only a test case's own transaction, which stands for
  autocommit): the INSERT runs on it and commits at once.
- `PRIVATE` (PostgreSQL inside the caller's transaction): the INSERT runs on
  a second connection of this thread to the same database, in autocommit.
- `DEFERRED` (SQLite inside the caller's transaction, where a second
  connection would wait for the write lock the caller holds; or a caller's
  block inside a test case's transaction): the write is kept in memory and
  run the moment the caller's outermost block ends, committed or rolled back,
  or its connection is closed.

The end of the caller's transaction is seen by wrapping three methods of that
connection object (`set_autocommit`, which `atomic` calls when the outermost
block ends either way, `savepoint_commit`, and `close`): Django has no
rollback hook.
"""

from __future__ import annotations

import atexit
import contextlib
import enum
import logging
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from django.core.signals import request_finished
from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

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

_local = threading.local()
_with_pending: weakref.WeakSet[BaseDatabaseWrapper] = weakref.WeakSet()


def route(connection: BaseDatabaseWrapper) -> Route:
    """Where a store on `connection` goes so that it commits on its own."""
    if not connection.in_atomic_block:
        return Route.DIRECT
    blocks = connection.atomic_blocks
    if all(getattr(block, "_from_testcase", False) for block in blocks):
        return Route.DIRECT
    if connection.vendor == "postgresql" and not getattr(blocks[0], "_from_testcase", False):
        _install_hooks(connection)
        return Route.PRIVATE
    _install_hooks(connection)
    return Route.DEFERRED


def in_callers_transaction(connection: BaseDatabaseWrapper) -> bool:
    """Whether `connection` is inside an atomic block of the caller's (a test
    case's own blocks stand for autocommit and do not count)."""
    return connection.in_atomic_block and not all(
        getattr(block, "_from_testcase", False) for block in connection.atomic_blocks
    )


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
    return private


def close_private_connections(**kwargs: Any) -> None:
    """Close this thread's second connections that Django would close (unusable,
    or older than `CONN_MAX_AGE`); at the end of each request."""
    for private in _local.__dict__.get("wrappers", {}).values():
        private.close_if_unusable_or_obsolete()


request_finished.connect(close_private_connections, dispatch_uid="deadletter.detached")


def defer(connection: BaseDatabaseWrapper, write: Write) -> None:
    """Run `write` once the caller's transaction on `connection` ends, however it ends."""
    pending: list[Write] = connection.__dict__.setdefault(_PENDING, [])
    pending.append(write)
    _with_pending.add(connection)


def pending_count(connection: BaseDatabaseWrapper) -> int:
    """How many deferred writes wait for the caller's transaction on `connection`."""
    return len(connection.__dict__.get(_PENDING, ()))


def _install_hooks(connection: BaseDatabaseWrapper) -> None:
    if connection.__dict__.get(_HOOKED):
        return
    set_autocommit = connection.set_autocommit
    savepoint_commit = connection.savepoint_commit
    close = connection.close
    ref = weakref.ref(connection)

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
    connection.close = hooked_close  # type: ignore[method-assign]
    connection.__dict__[_HOOKED] = True


def _transaction_ended(connection: BaseDatabaseWrapper, *, closed: bool = False) -> None:
    """Run the deferred writes: on the connection itself, or, when it was closed
    (the database rolled back by itself), on the private one, which then goes
    with it: a private connection lives no longer than its caller's."""
    if connection.__dict__.get(_FLUSHING):
        return
    connection.__dict__[_FLUSHING] = True
    try:
        if connection.__dict__.get(_PENDING):
            _flush(connection, private_connection(connection) if closed else connection)
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
            with transaction.atomic(using=via.alias) if via is connection else _atomic_on(via):
                for write in pending:
                    write(via)
    except Exception:
        logger.exception(
            "parked messages not written after the caller's transaction ended; "
            "retried when it next ends, lost if the process exits first (pending=%d)",
            len(pending),
        )
        return
    pending.clear()
    _with_pending.discard(connection)


@contextlib.contextmanager
def _atomic_on(private: BaseDatabaseWrapper) -> Iterator[None]:
    """A transaction on a connection that is not in `connections` (`atomic` takes an alias)."""
    private.set_autocommit(False)
    try:
        yield
    except BaseException:
        private.rollback()
        raise
    else:
        private.commit()
    finally:
        private.set_autocommit(True)


@atexit.register
def _flush_at_exit() -> None:
    """Last try for writes whose transaction never ended (a thread left mid-block)."""
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
