"""Each failed delivery attempt of a message, as rows of their own (`Attempt`),
keyed by the message key: the value stays the Go program's format, and the rows
stay put when the message is archived (the archive reads them by key).

Writes go in the caller's transaction (the one that records the failure in the
row), through Django's cursor with no savepoint of their own: a failure rolls
the whole settlement back, so the row and its history never disagree. The last
`KEEP` of a key are kept; older ones are trimmed when the key may hold more.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter.conf import conf
from deadletter.models import Attempt
from deadletter.store import sql

__all__ = [
    "ERROR_LIMIT",
    "KEEP",
    "AttemptOutcome",
    "AttemptRecord",
    "attempts_of",
    "cut",
    "forget",
    "move",
    "record_attempt",
    "rewrite_errors",
]

KEEP = 20
"""How many attempts of one key are kept, the newest."""

ERROR_LIMIT = 1024
"""The most UTF-8 bytes of an error kept, in the history and in `LastError` alike."""


class AttemptOutcome(enum.StrEnum):
    """What came of one failed attempt."""

    FAILED = "failed"
    TIMEOUT = "timeout"
    HELD = "held"
    PERMANENT = "permanent"
    MAX_ATTEMPTS = "max_attempts"
    KILLED = "killed"
    CHANGED = "changed"
    """The row was edited while the handler ran: the attempt's outcome was not applied."""


@dataclasses.dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One attempt as users see it: when it began, how long the handler ran
    (None: not known, a killed process), what came of it, the error, who tried."""

    at: datetime
    duration: float | None
    outcome: str
    error: str
    actor: str


def cut(text: str, limit: int = ERROR_LIMIT) -> str:
    """`text` cut to `limit` UTF-8 bytes on a character boundary."""
    raw = text.encode("utf-8", errors="replace")
    if len(raw) <= limit:
        return text
    return raw[:limit].decode("utf-8", errors="ignore")


def _table() -> str:
    return Attempt._meta.db_table


def record_attempt(
    connection: BaseDatabaseWrapper,
    key: bytes,
    *,
    at: datetime,
    duration: float | None,
    outcome: str,
    error: str,
    actor: str,
    attempts: int | None = None,
) -> None:
    """INSERT one attempt of `key` in the caller's transaction, then trim the key's
    rows beyond the newest `KEEP`. `attempts` is the message's `Attempts` after this
    one: a key holds more than `KEEP` rows only once that is above `KEEP`, so below
    it nothing is trimmed (None, for an attempt that leaves `Attempts` as it was, a
    held one: always trimmed). Raises the driver's `DatabaseError`."""
    insert = sql.statement(
        connection,
        "INSERT INTO {table} ({key}, at, duration, outcome, error, actor)"
        " VALUES (%s, %s, %s, %s, %s, %s)",
        table=_table(),
    )
    params = (
        bytes(key),
        connection.ops.adapt_datetimefield_value(at),
        duration,
        str(outcome),
        cut(error),
        actor[: Attempt._meta.get_field("actor").max_length],
    )
    with connection.cursor() as cursor:
        cursor.execute(insert, params)
        if attempts is None or attempts > KEEP:
            _trim(connection, cursor, bytes(key))


def _trim(connection: BaseDatabaseWrapper, cursor: Any, key: bytes) -> None:
    """Delete the rows of `key` older than its newest `KEEP`: the id of the first one
    past them, then a delete up to it (MySQL refuses a subquery on the table a
    DELETE writes)."""
    first_old = sql.statement(
        connection,
        "SELECT id FROM {table} WHERE {key} = %s ORDER BY id DESC LIMIT 1 OFFSET {keep}",
        table=_table(),
        keep=KEEP,
    )
    cursor.execute(first_old, (key,))
    row = cursor.fetchone()
    if row is None:
        return
    delete = sql.statement(
        connection, "DELETE FROM {table} WHERE {key} = %s AND id <= %s", table=_table()
    )
    cursor.execute(delete, (key, row[0]))


def forget(connection: BaseDatabaseWrapper, key: bytes) -> int:
    """Delete every attempt of `key` in the caller's transaction (a delivered
    message's); how many. Raises the driver's `DatabaseError`."""
    delete = sql.statement(connection, "DELETE FROM {table} WHERE {key} = %s", table=_table())
    with connection.cursor() as cursor:
        cursor.execute(delete, (bytes(key),))
        return int(cursor.rowcount)


def move(connection: BaseDatabaseWrapper, old: bytes, new: bytes) -> int:
    """Give the attempts of `old` to `new` in the caller's transaction (a message
    that took a fresh key: a remainder, a restore at the tail); how many."""
    update = sql.statement(
        connection, "UPDATE {table} SET {key} = %s WHERE {key} = %s", table=_table()
    )
    with connection.cursor() as cursor:
        cursor.execute(update, (bytes(new), bytes(old)))
        return int(cursor.rowcount)


def copy(connection: BaseDatabaseWrapper, old: bytes, new: bytes) -> int:
    """The attempts of `old` again under `new`, oldest first, in the caller's
    transaction (a restore at the tail while a live copy keeps `old` and its own
    history); how many."""
    attempts = Attempt.objects.using(connection.alias)
    fields = ("at", "duration", "outcome", "error", "actor")
    copies = [
        Attempt(key=bytes(new), **dict(zip(fields, row, strict=True)))
        for row in attempts.filter(key=bytes(old)).order_by("id").values_list(*fields)
    ]
    if copies:
        attempts.bulk_create(copies)
    return len(copies)


def rewrite_errors(
    connection: BaseDatabaseWrapper, key: bytes, rewrite: Callable[[str], str]
) -> int:
    """Each recorded error of `key` through `rewrite`, in the caller's transaction (an
    edit masking what the message no longer holds); how many changed."""
    attempts = Attempt.objects.using(connection.alias).filter(key=bytes(key))
    changed = 0
    for attempt_id, error in attempts.values_list("id", "error"):
        new = rewrite(error)
        if new != error:
            changed += attempts.filter(id=attempt_id).update(error=new)
    return changed


def attempts_of(key: bytes) -> list[AttemptRecord]:
    """The recorded attempts of `key`, oldest first (newest last), as a timeline reads."""
    rows = (
        Attempt.objects.using(conf.DATABASE)
        .filter(key=bytes(key))
        .order_by("id")
        .values_list("at", "duration", "outcome", "error", "actor")
    )
    return [AttemptRecord(*row) for row in rows]
