"""The archive: what left a queue other than by delivery, kept with its bytes and
key, why and by whom, to read and to restore (docs/archive.md).

Every drop path archives in the transaction that deletes the row
(`archive_write.archive_rows`); an operator's delete is `discard`; `restore`
puts an entry back under its own key, its place in the order. Retention
(`purge`) and the per-queue counts are in `archive_retention`. A queue whose
`archive_for` is `timedelta(0)` has no archive: every path then does exactly
what it did before the archive existed.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from django.db import DatabaseError, transaction
from django.db.models import Q

from deadletter import signals
from deadletter.conf import conf
from deadletter.exceptions import DeadletterError
from deadletter.models import ArchivedMessage, QueuedMessage
from deadletter.queue import archive_write, history
from deadletter.queue.api import Removal, dequeue, remove_msg
from deadletter.queue.archive_retention import archived_counts, purge
from deadletter.queue.archive_write import archive_rows, enabled, last_error_of
from deadletter.queue.moves import with_origin
from deadletter.queue.rows import delete_sql, insert_value
from deadletter.store import reconnect, sql
from deadletter.wire import codec, keys
from deadletter.wire.messages import Message

__all__ = [
    "RESTORE",
    "RESTORE_ACCESS",
    "UNSEALED_MARK",
    "VIEW",
    "ArchiveError",
    "Archived",
    "Restored",
    "archive_rows",
    "archived_counts",
    "archived_msgs",
    "delete_entries",
    "discard",
    "discard_many",
    "enabled",
    "get_archived",
    "get_entry",
    "purge",
    "restore",
    "restore_msg",
]

logger = logging.getLogger("deadletter")

UNSEALED_MARK = "NeedsOperator: refused to redrive, "
"""How `LastError` starts when an integration refused a message because its seal
broke: the drain records a `NeedsOperator` as `NeedsOperator: <text>`, and
`Seal.require`'s text (the only one of that form) starts "refused to redrive, ".
An operator deleting such a message archives it as `unsealed`."""

PAGE = 500

VIEW = "deadletter.view_archivedmessage"
"""The Django permission reading the archive needs (the admin's list, the API's)."""
RESTORE = "deadletter.restore_archivedmessage"
"""The Django permission a restore needs."""
RESTORE_ACCESS = "retry"
"""The queue access action a restore needs (`queue.access`): it hands the message
back to its queue's drain, as a retry does."""


class ArchiveError(DeadletterError, LookupError):
    """No such archive entry (restored or purged meanwhile); the text says which."""


@dataclasses.dataclass(frozen=True, slots=True)
class Archived:
    """One archive entry as users see it: `msg` is the message its value holds
    (the first of a row that held several), None for a corrupt row; `value` is
    the row's bytes as the queue held them."""

    id: int
    key: bytes
    queue: str
    reason: str
    actor: str
    archived_at: datetime
    msg: Message | None
    value: bytes
    last_error: str


class Restored(NamedTuple):
    """Where `restore` put an entry back: `moved` when its key held another message
    and it went to its queue's tail under a fresh key; `replaced` when it took its
    key back from another copy of itself (an edit's), which went to the archive."""

    key: bytes
    moved: bool
    replaced: bool = False


_FIELDS = ("id", "key", "queue", "reason", "actor", "archived_at", "value", "last_error")


def _entries() -> Any:
    return ArchivedMessage.objects.using(conf.DATABASE)


def _archived(row: Sequence[Any]) -> Archived:
    entry_id, key, queue, reason, actor, archived_at, value, last_error = row
    value = bytes(value) if value is not None else b""
    try:
        msgs = codec.decode(value)
    except codec.CodecError:
        msgs = []
    return Archived(
        id=int(entry_id),
        key=bytes(key),
        queue=queue,
        reason=reason,
        actor=actor,
        archived_at=archived_at,
        msg=msgs[0] if msgs else None,
        value=value,
        last_error=last_error,
    )


def reason_of_delete(value: bytes) -> str:
    """`unsealed` when the message's `LastError` says its seal broke
    (`UNSEALED_MARK`), else `deleted`."""
    if last_error_of(value).startswith(UNSEALED_MARK):
        return ArchivedMessage.Reason.UNSEALED
    return ArchivedMessage.Reason.DELETED


def _select_sql(connection: Any, many: int | None) -> str:
    where = "= %s" if many is None else f"IN ({', '.join(['%s'] * many)})"
    return sql.statement(
        connection, f"SELECT {{key}}, value FROM {{table}} WHERE {{key}} {where}{{for_update}}"
    )


def discard(key: bytes, actor: str) -> Removal:
    """An operator's delete of the row `key` by `actor`: archived (as `deleted`, or
    `unsealed`, `reason_of_delete`) and deleted in one transaction; with the
    queue's archive off, exactly `queue.remove_msg`. Never raises for database
    errors (`Removal.FAILED`); sends `message_dequeued` once committed."""
    key = bytes(key)
    name = keys.queue_of(key)
    if not enabled(name):
        return remove_msg(key)
    connection = sql.connection()
    try:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            sql.take_write_lock(connection, cursor, sql.table())
            cursor.execute(_select_sql(connection, None), (key,))
            row = cursor.fetchone()
            if row is None:
                return Removal.ABSENT
            value = bytes(row[1]) if row[1] is not None else b""
            cursor.execute(delete_sql(connection), (key,))
            archive_rows(connection, name, [(key, value)], reason_of_delete(value), actor)
    except DatabaseError:
        logger.exception("discard failed key=%s", key.hex())
        reconnect.close_if_lost(connection)
        return Removal.FAILED
    logger.info("archived message queue=%s key=%s actor=%s", name, key.hex(), actor)
    if signals.message_dequeued.receivers:
        sql.after_commit(connection, signals.message_dequeued, sender=name, key=key)
    return Removal.REMOVED


def discard_many(keys_: Sequence[bytes], actor: str) -> int:
    """`discard` for a chunk of keys (a bulk delete's), archived and deleted in one
    transaction; how many rows went. Keys of queues whose archive is off are
    dequeued one by one, as before the archive. Raises `DatabaseError` (nothing of
    the chunk's archived part is then changed)."""
    wanted = list(dict.fromkeys(bytes(k) for k in keys_))
    kept = [k for k in wanted if enabled(keys.queue_of(k))]
    done = sum(1 for k in wanted if k not in set(kept) and dequeue(k))
    if not kept:
        return done
    connection = sql.connection()
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        sql.take_write_lock(connection, cursor, sql.table())
        cursor.execute(_select_sql(connection, len(kept)), kept)
        found = [(bytes(k), bytes(v) if v is not None else b"") for k, v in cursor.fetchall()]
        if not found:
            return done
        cursor.execute(
            sql.statement(
                connection,
                f"DELETE FROM {{table}} WHERE {{key}} IN ({', '.join(['%s'] * len(found))})",
            ),
            [k for k, _ in found],
        )
        by_reason: dict[tuple[str, str], list[tuple[bytes, bytes]]] = {}
        for key, value in found:
            by_reason.setdefault((keys.queue_of(key), reason_of_delete(value)), []).append(
                (key, value)
            )
        for (name, reason), rows in by_reason.items():
            archive_rows(connection, name, rows, reason, actor)
        if signals.message_dequeued.receivers:
            for key, _ in found:
                sql.after_commit(
                    connection, signals.message_dequeued, sender=keys.queue_of(key), key=key
                )
    logger.info("archived messages count=%d actor=%s", len(found), actor)
    return done + len(found)


def archived_msgs(queue: str | None = None) -> Iterator[Archived]:
    """The archive's entries (of `queue`, or of every queue), oldest first, read
    `PAGE` at a time: no transaction stays open between pages."""
    entries = _entries().order_by("archived_at", "id")
    if queue is not None:
        entries = entries.filter(queue=queue)
    after: tuple[datetime, int] | None = None
    while True:
        page = entries
        if after is not None:
            page = page.filter(
                Q(archived_at__gt=after[0]) | Q(archived_at=after[0], id__gt=after[1])
            )
        rows = list(page.values_list(*_FIELDS)[:PAGE])
        for row in rows:
            yield _archived(row)
        if len(rows) < PAGE:
            return
        after = (rows[-1][5], rows[-1][0])


def get_archived(key: bytes) -> Archived | None:
    """The newest entry of `key` (a key archived twice, as an edited message's
    original and later itself, has two); None when the archive has none."""
    row = _entries().filter(key=bytes(key)).order_by("-id").values_list(*_FIELDS).first()
    return None if row is None else _archived(row)


def get_entry(entry_id: int) -> Archived | None:
    """The entry `entry_id`; None when there is none."""
    row = _entries().filter(id=entry_id).values_list(*_FIELDS).first()
    return None if row is None else _archived(row)


def delete_entries(entry_ids: Sequence[int]) -> int:
    """Delete the entries `entry_ids` for good (an operator's choice, not the
    retention's); how many there were."""
    deleted: int = _entries().filter(id__in=list(entry_ids)).delete()[0]
    return deleted


def restore(entry_id: int, *, actor: str) -> Restored:
    """Put the entry back in its queue, bytes unchanged (its attempts and
    `LastError` are in them), and remove it from the archive, in one transaction:
    under its own key, its place in the order. When a live row holds that key and
    is another copy of the same message (an edit's original and its edited copy,
    whatever was deleted or restored between), the entry takes the key back
    (`replaced`) and the live copy is archived as `edited` by `actor`, so at most
    one copy is ever live. When the key holds another message, the entry goes to
    the tail under a fresh key (`moved`), its attempt history copied to the new key
    (the live row keeps its own). `ArchiveError`
    when the entry is gone; `QueueingError` or `DatabaseError` when it cannot be
    written (nothing changed). `message_enqueued` once committed."""
    connection = sql.connection()
    replaced = False
    with transaction.atomic(using=connection.alias):
        with connection.cursor() as cursor:
            sql.take_write_lock(connection, cursor, archive_write.table())
        row = (
            _entries()
            .select_for_update()
            .filter(id=entry_id)
            .values_list("key", "queue", "value", "signature", "reason")
            .first()
        )
        if row is None:
            raise ArchiveError(f"archive entry {entry_id} does not exist (restored or purged?)")
        old_key, name = bytes(row[0]), row[1]
        value = bytes(row[2]) if row[2] is not None else b""
        replaced = _take_back(connection, name, old_key, value, row[3], actor)
        if replaced:
            new_key = old_key
        else:
            new_key = insert_value(
                connection,
                keys.prefix_of(old_key),
                value,
                queue=name,
                key=old_key,
                signature=row[3],
            )
        moved = new_key != old_key
        if moved:
            history.copy(connection, old_key, new_key)
            value = _keep_origin(connection, new_key, value, old_key)
        _entries().filter(id=entry_id).delete()
        if signals.message_enqueued.receivers:
            msg = codec.decode_single(value) if value else None
            if msg is not None:
                sql.after_commit(
                    connection, signals.message_enqueued, sender=name, key=new_key, msg=msg
                )
    logger.info(
        "restored message queue=%s key=%s moved=%s replaced=%s actor=%s entry=%s",
        name,
        new_key.hex(),
        moved,
        replaced,
        actor,
        entry_id,
    )
    return Restored(new_key, moved, replaced)


def _take_back(
    connection: Any, queue: str, key: bytes, value: bytes, signature: str | None, actor: str
) -> bool:
    """The entry back under its key in place of the live row there when that row is
    another copy of the same message (`_same_message`: an edit's, or a copy restored
    before), which is archived as `edited` by `actor`: a key never holds two live
    copies. False when the key is free or holds another message (a plain restore)."""
    live = (
        QueuedMessage.objects.using(connection.alias)
        .select_for_update()
        .filter(key=key)
        .values_list("value", flat=True)
        .first()
    )
    if live is None or not _same_message(bytes(live), value):
        return False
    archive_rows(connection, queue, [(key, bytes(live))], ArchivedMessage.Reason.EDITED, actor)
    sql.write(
        connection,
        sql.statement(
            connection,
            "UPDATE {table} SET value = %s, signature = %s, due_at = NULL, search_pending = 1"
            " WHERE {key} = %s",
        ),
        (value, signature, key),
    )
    return True


def _same_message(live: bytes, archived: bytes) -> bool:
    """Whether two values under one key are copies of one message: an edit keeps the
    key and the first failure (`QueuedAt`), which nothing else shares with it (the
    other messages of a split row have keys of their own once live)."""
    try:
        first, second = codec.decode(live), codec.decode(archived)
    except codec.CodecError:
        return False
    if len(first) != 1 or len(second) != 1:
        return False
    a, b = first[0].queued_at, second[0].queued_at
    return (a is None and b is None) or (
        a is not None and b is not None and a.format() == b.format()
    )


def _keep_origin(connection: Any, key: bytes, value: bytes, first_key: bytes) -> bytes:
    """A message restored under a fresh key keeps the key it had first in `Origin`
    (`moves.with_origin`), so a handler's idempotency key (`ctx.key`) stays the same."""
    kept = with_origin(value, first_key)
    if kept != value:
        sql.write(
            connection,
            sql.statement(connection, "UPDATE {table} SET value = %s WHERE {key} = %s"),
            (kept, key),
        )
    return kept


def restore_msg(key: bytes, *, actor: str = "") -> bytes:
    """Put the newest archive entry of `key` back in its queue (`restore`) and
    return the live key: `key` itself, or a fresh tail key when `key` was taken
    again (logged as a warning). `ArchiveError` when the archive has no entry of
    `key`."""
    key = bytes(key)
    entry = get_archived(key)
    if entry is None:
        raise ArchiveError(f"no archived message has the key {key.hex()}")
    restored = restore(entry.id, actor=actor)
    if restored.moved:
        logger.warning(
            "restored message under a fresh key, its own was taken queue=%s key=%s was=%s",
            entry.queue,
            restored.key.hex(),
            key.hex(),
        )
    return restored.key
