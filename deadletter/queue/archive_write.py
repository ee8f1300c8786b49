"""The archive's one write: rows leaving a queue other than by delivery go into
`ArchivedMessage`, bytes and key unchanged, in the caller's transaction (the one
that deletes them), with why, by whom, and the message's last error.

Below every path that drops or deletes a row (`rows`, `legacy`, `settlements`,
`archive`), so those paths need nothing above them; `queue.archive` is the
archive's public face and re-exports `archive_rows` and `enabled`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter.models import ArchivedMessage
from deadletter.queue import limits
from deadletter.queue.causes import LAST_ERROR_KEY, signature_of
from deadletter.store import sql
from deadletter.wire import codec
from deadletter.wire.messages import Message

__all__ = ["ACTOR_DRAIN", "REASONS", "archive_rows", "enabled", "last_error_of", "table"]

ACTOR_DRAIN = "drain"
"""The actor of what the queue's own rules drop (age, corrupt rows, a handler's verdict)."""

REASONS = frozenset(ArchivedMessage.Reason.values)
ACTOR_MAX = ArchivedMessage._meta.get_field("actor").max_length or 150


def table() -> str:
    """The archive table's name, from the model."""
    return ArchivedMessage._meta.db_table


def enabled(queue: str) -> bool:
    """Whether what leaves `queue` is archived: its `archive_for` is not `timedelta(0)`."""
    return limits.archive_for(queue) != limits.ARCHIVE_OFF


def last_error_of(value: bytes) -> str:
    """The `LastError` of the first message of `value` that has one; "" when none
    does or the value does not decode (a corrupt row)."""
    return _last_error_in(_decoded(value))


def _decoded(value: bytes) -> list[Message]:
    try:
        return codec.decode(value)
    except codec.CodecError:
        return []


def _last_error_in(msgs: list[Message]) -> str:
    for msg in msgs:
        error = msg.extra.get(LAST_ERROR_KEY)
        if isinstance(error, str) and error:
            return error
    return ""


def archive_rows(
    connection: BaseDatabaseWrapper,
    queue: str,
    rows: Sequence[tuple[bytes, bytes]],
    reason: str,
    actor: str,
) -> int:
    """Archive `rows` (`(key, value)`, the value as the queue held it) of `queue`
    for `reason` by `actor`: one INSERT statement, in the caller's transaction, so
    the entries commit or roll back with the delete. 0, and no statement, when the
    queue's archive is off or there is nothing to archive. `ValueError` for an
    unknown reason."""
    if reason not in REASONS:
        raise ValueError(f"unknown archive reason {reason!r}; known: {', '.join(sorted(REASONS))}")
    if not rows or not enabled(queue):
        return 0
    now = connection.ops.adapt_datetimefield_value(datetime.now(UTC))
    actor = actor[:ACTOR_MAX]
    params = []
    for key, value in rows:
        msgs = [] if reason == ArchivedMessage.Reason.CORRUPT else _decoded(value)
        error = _last_error_in(msgs)
        cause = signature_of(error, queue=queue, msgs=msgs)
        params.append((bytes(key), queue, bytes(value), reason, actor, now, error, cause))
    query = sql.statement(
        connection,
        "INSERT INTO {table} ({key}, queue, value, reason, actor, archived_at, last_error,"
        " signature) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        table=table(),
    )
    with connection.cursor() as cursor:
        for row in params:
            sql.refuse_oversized(connection, query, row)
        cursor.executemany(query, params)
    return len(params)
