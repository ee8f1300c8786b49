"""The transactions a message is claimed, handled and settled in on the queue's
database: one a message for a whole source, and a handler's savepoint within it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from django.db import DatabaseError, Error, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter.conf import conf
from deadletter.store import sql


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

    With no transaction open (SQLite, which claims no row: the drain holds none
    while a handler runs) the handler gets one of its own, `handler_transaction`.
    """
    connection = sql.connection()
    if not connection.in_atomic_block and connection.get_autocommit():
        with handler_transaction(connection):
            yield
        return
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


_READS = ("SELECT",)
"""How a statement a handler's transaction need not begin for starts: a read in
autocommit holds no lock once it has returned."""


@contextlib.contextmanager
def handler_transaction(connection: BaseDatabaseWrapper) -> Iterator[None]:
    """Run a handler in an atomic block of its own on `connection`, in autocommit
    until now, as a server's claim transaction holds one: its writes commit when it
    returns and are undone when it raises or marks the block for rollback
    (`transaction.set_rollback(True)`), its `on_commit` callbacks run after the
    commit or are dropped, and its own `atomic()` is a savepoint.

    The block begins with no statement: the connection leaves autocommit (on SQLite
    no statement either) and the transaction itself is begun (`BEGIN`, in the
    database's `transaction_mode`) just before the handler's first statement that
    is not a read, seen through `connection.execute_wrapper`. A handler that only
    reads, or touches no database, takes no lock: a SQLite write lock is held over
    a handler only from its own first write.
    """
    begun = False
    connection.set_autocommit(False)  # connects: the transaction mode is read then
    mode = getattr(connection, "transaction_mode", None)
    begin = f"BEGIN {mode}" if isinstance(mode, str) and mode else "BEGIN"

    def before_write(execute: Any, text: str, params: Any, many: bool, context: Any) -> Any:
        nonlocal begun
        if not begun and not text.lstrip().upper().startswith(_READS):
            begun = True  # the BEGIN itself comes through here too
            with connection.cursor() as cursor:
                cursor.execute(begin)
        return execute(text, params, many, context)

    block = transaction.atomic(using=connection.alias, savepoint=False)
    failed = True
    try:
        block.__enter__()
        try:
            with connection.execute_wrapper(before_write):
                yield
        except BaseException as exc:
            block.__exit__(type(exc), exc, exc.__traceback__)
            raise
        block.__exit__(None, None, None)
        failed = connection.needs_rollback
    finally:
        _end(connection, commit=not failed, begun=begun)


def _end(connection: BaseDatabaseWrapper, *, commit: bool, begun: bool) -> None:
    """End a handler's transaction and go back to autocommit, which runs the
    `on_commit` callbacks of a commit; a connection that cannot is closed. One
    never begun (the handler wrote nothing) has nothing to commit or roll back:
    only its callbacks are run or dropped."""
    try:
        if not begun:
            connection.needs_rollback = False
            if not commit:
                connection.run_on_commit = []
            connection.set_autocommit(True)
            if commit and connection.run_on_commit:
                connection.run_and_clear_commit_hooks()
            return
        if commit:
            connection.commit()
        else:
            connection.rollback()
        connection.set_autocommit(True)
    except Error:
        with contextlib.suppress(Error):
            connection.rollback()
        connection.close()
        if commit:
            raise
