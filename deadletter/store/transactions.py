"""One transaction on a connection that may be a private one
(`detached.private_connection`, not in `connections`, so `atomic`, which takes
an alias, cannot open it): what a store, a list's park and a deferred flush
write in together."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

__all__ = ["transaction_on"]


@contextlib.contextmanager
def transaction_on(connection: BaseDatabaseWrapper, *, savepoint: bool = False) -> Iterator[None]:
    """A transaction on `connection`: an atomic block on the alias's own
    connection, by hand on a private one, or the one it is in already (a test
    case's, a deferred park's flush). With `savepoint`, the alias's own
    connection takes a savepoint inside a transaction already open, so a
    failure takes back what the block wrote and nothing of the caller's."""
    own = connections[connection.alias] is connection
    if own and (savepoint or (connection.get_autocommit() and not connection.in_atomic_block)):
        with transaction.atomic(using=connection.alias):
            yield
    elif connection.in_atomic_block or not connection.get_autocommit():
        yield
    else:
        connection.set_autocommit(False)
        try:
            yield
        except BaseException:
            connection.rollback()
            raise
        else:
            connection.commit()
        finally:
            connection.set_autocommit(True)
