"""What a deadletter command says when its database cannot serve it: one line that
names the database and what to do, and a non-zero exit, instead of a driver's
traceback. Every `deadletter_*` command is a `DatabaseCommand`, so this holds for
its system checks too (MySQL/MariaDB's read the server's version).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connections
from django.db.migrations.executor import MigrationExecutor

from deadletter.conf import conf
from deadletter.store import reconnect

__all__ = ["DatabaseCommand", "database_errors", "database_problem", "require_migrated"]

# A missing table, as PostgreSQL's SQLSTATE and MySQL/MariaDB's error number say it.
_UNDEFINED_TABLE_SQLSTATE = "42P01"
_NO_SUCH_TABLE_ERRNO = 1146


def where(alias: str | None = None) -> str:
    """`database 'default' (deadletter on 127.0.0.1:5432)`: the alias and what it names."""
    return reconnect.where(connections[alias or conf.DATABASE])


def migrate_hint(alias: str | None = None) -> str:
    alias = alias or conf.DATABASE
    return "run `manage.py migrate`" + ("" if alias == "default" else f" --database {alias}")


def is_missing_table(exc: DatabaseError) -> bool:
    """Whether `exc` says a table is not there (SQLite has no code for it, only text)."""
    if getattr(exc.__cause__, "sqlstate", None) == _UNDEFINED_TABLE_SQLSTATE:
        return True
    if exc.args and exc.args[0] == _NO_SUCH_TABLE_ERRNO:
        return True
    return "no such table" in str(exc)


def database_problem(exc: DatabaseError, alias: str | None = None, *, then: str = "") -> str:
    """One line for `exc`: a missing table says to migrate, a connection that could
    not be opened names the database and the driver's reason (nothing was done in
    either case), anything else names the database, the driver's first line and
    `then` (what the work done so far means)."""
    alias = alias or conf.DATABASE
    if is_missing_table(exc):
        return f"{where(alias)} has no deadletter tables: {migrate_hint(alias)}"
    if connections[alias].connection is None:
        return f"cannot reach {where(alias)}: {reconnect.first_line(exc)}"
    return f"{where(alias)} failed: {reconnect.first_line(exc)}{then}"


@contextlib.contextmanager
def database_errors(alias: str | None = None, *, then: str = "") -> Iterator[None]:
    """Turn a database error in the block into a one-line `CommandError` (exit 1),
    `database_problem`'s."""
    try:
        yield
    except DatabaseError as exc:
        raise CommandError(database_problem(exc, alias, then=then)) from exc


class DatabaseCommand(BaseCommand):
    """A command that a database it cannot use, in its system checks as in its
    work, ends with `database_problem`'s one line and exit status 1."""

    def execute(self, *args: Any, **options: Any) -> str | None:
        with database_errors():
            return super().execute(*args, **options)


def require_migrated(alias: str | None = None) -> None:
    """A `CommandError` unless every migration of the app is applied on the queue's
    database: a command that swallows database errors per queue (the drain) calls
    this first, so it cannot report a pass over tables that are not there."""
    alias = alias or conf.DATABASE
    with database_errors(alias):
        executor = MigrationExecutor(connections[alias])
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes("deadletter"))
    if plan:
        first, _ = plan[0]
        raise CommandError(
            f"{where(alias)} has {len(plan)} unapplied migration(s), the first "
            f"{first.app_label}.{first.name}: {migrate_hint(alias)}"
        )
