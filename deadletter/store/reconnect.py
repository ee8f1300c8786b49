"""A long-lived process's connection, as Django keeps a request's: closed when it
was lost or outlived `CONN_MAX_AGE`, so the next statement connects afresh, and
named in one line when it cannot be had."""

from __future__ import annotations

import contextlib

from django.db import DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper

__all__ = ["close_if_lost", "first_line", "recycle", "where"]


def close_if_lost(connection: BaseDatabaseWrapper) -> bool:
    """After a failed statement outside any atomic block: close `connection` when it
    no longer answers (the server restarted, failed over or ended the session), so
    the next statement connects afresh; whether it did. Django's own test
    (`is_usable`) costs a round trip: call it only after an error."""
    if connection.in_atomic_block or connection.connection is None:
        return False
    if connection.is_usable():
        return False
    with contextlib.suppress(DatabaseError):  # the driver may refuse to close a dead socket
        connection.close()
    return True


def first_line(exc: BaseException) -> str:
    """A driver's message without its second and later lines (psycopg adds hints)."""
    lines = str(exc).strip().splitlines()
    return lines[0].strip() if lines else type(exc).__name__


def recycle(connection: BaseDatabaseWrapper) -> None:
    """Between two units of work of a long-lived process (a drain service's passes),
    what Django does between two requests: close `connection` when an error left it
    unusable or it outlived `CONN_MAX_AGE`, so the next statement connects afresh.
    Never inside an atomic block, whose transaction the connection holds."""
    if connection.in_atomic_block:
        return
    with contextlib.suppress(DatabaseError):
        connection.close_if_unusable_or_obsolete()


def where(connection: BaseDatabaseWrapper) -> str:
    """`database 'default' (deadletter on 127.0.0.1:5432)`: the alias and what it names."""
    s = connection.settings_dict
    place = str(s.get("NAME") or "")
    if s.get("HOST"):
        place += f" on {s['HOST']}" + (f":{s['PORT']}" if s.get("PORT") else "")
    return f"database {connection.alias!r} ({place})"
