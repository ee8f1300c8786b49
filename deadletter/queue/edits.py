"""Edit a parked message in place: one transaction that checks the row is still
the one the operator opened (its ETag), archives the original as `edited` and
writes the new value under the same key, so the queue never holds both copies.

Opt-in per queue (`limits.editable`). What the drain and the integrations own
stays as it is: the first failure (`QueuedAt`, which anchors the age limit), the
attempt count and last error, and every key an integration seals
(`seals.reserved()`): an edit that changes one is refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import cbor2
from django.apps import apps
from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils.crypto import constant_time_compare, salted_hmac

from deadletter.conf import conf
from deadletter.exceptions import DeadletterError
from deadletter.models import ArchivedMessage, HexKey, QueuedMessage
from deadletter.queue import archive, browse, history, limits, redaction, seals
from deadletter.queue.causes import signature_of
from deadletter.queue.refusals import Refused
from deadletter.queue.rows import ATTEMPTS_KEY, LAST_ERROR_KEY, QueueingError
from deadletter.store import sql
from deadletter.wire import codec, jsonvalues, keys
from deadletter.wire.gotime import GoOnlyTime, GoTime
from deadletter.wire.messages import Message

__all__ = [
    "ACCESS",
    "DRAIN_KEYS",
    "PERMISSION",
    "SHOWN_CHARS",
    "Change",
    "EditConflict",
    "EditRefused",
    "Edited",
    "audit",
    "edit_msg",
    "editable_message",
    "etag_matches",
    "etag_of",
    "etags_of",
    "fixed_keys",
    "masked_fields",
    "queue_refusal",
    "tagged_row",
    "row_value",
    "shown",
]

logger = logging.getLogger("deadletter")

PERMISSION = "deadletter.change_queuedmessage"
"""The Django permission an edit needs (the admin's form, the API's PATCH)."""
ACCESS = "edit"
"""The queue access action an edit needs (`queue.access`)."""
DRAIN_KEYS = (ATTEMPTS_KEY, LAST_ERROR_KEY)
"""Extra keys the drain keeps (the attempt count, the last error): not edited."""
SHOWN_CHARS = 200
"""How much of an old or new value the audit log keeps."""
_ETAG_CHARS = 32
_ETAG_SALT = "deadletter.queue.edits.etag"
CHANGE_FLAG = 2
"""`django.contrib.admin.models.CHANGE`, the flag `ModelAdmin.log_change` writes."""


class EditConflict(DeadletterError):
    """The row is gone or no longer what the editor opened (another edit, a retry,
    a delivery came first); nothing was written. The text says which."""


class EditRefused(Refused):
    """An edit the rules do not allow (a queue not editable, a kept or sealed key
    changed, a value the Go format cannot hold); nothing was written. `field`
    names what is at fault when one field is."""


@dataclasses.dataclass(frozen=True, slots=True)
class Change:
    """One field an edit changed: `name` is the API's (`subject`, `username`, ...,
    `extra.<key>`); `old` / `new` are None for a key added / removed."""

    name: str
    old: Any
    new: Any


@dataclasses.dataclass(frozen=True, slots=True)
class Edited:
    """An edit that was saved: the row's key (unchanged), its new ETag and message,
    what changed, and the message it replaced."""

    key: bytes
    etag: str
    msg: Message
    changes: tuple[Change, ...]
    old: Message


def etag_of(key: bytes, value: bytes, secret: str | bytes | None = None) -> str:
    """A strong ETag of row `key` holding `value`: any change to the bytes changes
    it, and it reveals nothing of them. An HMAC under `SECRET_KEY` (or `secret`),
    never a plain digest: a viewer shown a masked value could otherwise encode
    guesses with the codec and compare digests until one matched. The key is in
    it, so two rows never compare equal by their tags."""
    key = bytes(key)
    mac = salted_hmac(
        _ETAG_SALT,
        len(key).to_bytes(2, "big") + key + bytes(value),
        secret=secret,
        algorithm="sha256",
    )
    return mac.hexdigest()[:_ETAG_CHARS]


def etags_of(key: bytes, value: bytes) -> tuple[str, ...]:
    """The tags a client may hold for row `key` holding `value`: under `SECRET_KEY`
    first, then under each of `SECRET_KEY_FALLBACKS`, so a rotated key does not
    turn every open form stale."""
    secrets = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", ())]
    return tuple(etag_of(key, value, secret) for secret in secrets)


def etag_matches(key: bytes, value: bytes, tag: str | None) -> bool:
    """Whether `tag` is an ETag of row `key` holding `value` (`etags_of`)."""
    if not tag:
        return False
    found = False
    for candidate in etags_of(key, value):
        found |= constant_time_compare(candidate, tag)
    return found


def row_value(key: bytes) -> bytes | None:
    """The stored bytes of row `key` (what its ETag is of); None when it is gone."""
    rows = QueuedMessage.objects.using(conf.DATABASE).filter(key=bytes(key))
    found = rows.values_list("value", flat=True).first()
    return None if found is None else bytes(found)


def tagged_row(key: bytes) -> tuple[browse.Row, str] | None:
    """Row `key` as the API shows it and its ETag, from one read (so the tag is of
    what is shown); None when it is gone."""
    value = row_value(key)
    if value is None:
        return None
    size = len(value)
    msgs: list[Message] | None = None
    too_large = browse.is_too_large(key, size)
    if not too_large:
        with contextlib.suppress(codec.CodecError):
            msgs = codec.decode(value)
    return browse.Row(bytes(key), msgs, size, too_large), etag_of(key, value)


def fixed_keys() -> dict[str, str]:
    """The extra keys no edit changes, each with why, as the form says it."""
    why = dict.fromkeys(DRAIN_KEYS, "kept by the drain (attempt count and last error)")
    for name, owner in seals.reserved().items():
        why[name] = (
            f"set by {owner}, which seals it: a changed value would break the seal "
            "and its handler would refuse the message"
        )
    return why


def queue_refusal(queue: str) -> EditRefused | None:
    """Why no message of `queue` may be edited (its policy is not `editable`), or None."""
    if limits.editable(queue):
        return None
    return EditRefused(f"queue {queue!r} is not editable: its policy has no 'editable': True")


def masked_fields(msg: Message, shown: Message) -> tuple[str, ...]:
    """The fields (`Change` names) of `msg` that `shown`, its redacted form for a
    user (`redaction.redacted`), masks: that user may not overwrite them either."""
    if shown is msg:
        return ()
    return tuple(change.name for change in changes_of(msg, shown))


def editable_message(value: bytes) -> Message:
    """The one message of a row's value; `EditRefused` for a row that is corrupt,
    empty or holds several (the next fetch splits those first)."""
    try:
        msgs = codec.decode(bytes(value))
    except codec.CodecError as exc:
        raise EditRefused(f"the row does not decode ({exc}): only delete it") from None
    if len(msgs) != 1:
        raise EditRefused(
            f"the row holds {len(msgs)} messages: a fetch splits it into one row each first"
        )
    return msgs[0]


def edit_msg(
    key: bytes,
    msg: Message,
    *,
    expected: str,
    actor: str,
    held: Callable[[bytes], bool] | None = None,
    user: Any = None,
) -> Edited:
    """Replace the message of row `key` with `msg`, if the row's bytes still have
    ETag `expected` (`etag_matches`): in one transaction the row is read locked, its original
    archived as `edited` (by `actor`) and the new value written under the same
    key, due now (an edit that changes nothing writes nothing).

    A saved change is recorded in the message's History as `user`'s (`audit`).
    `held` says whether a handler has the message in hand now (`drain.holding`,
    asked with the row locked): on SQLite, where a drain holds no row lock while its
    handler runs, such a row is a conflict, as the servers' locks make it.

    Raises `EditConflict` when the row is gone, changed or held; `EditRefused` when the
    queue is not editable, `msg` changes a kept key, or its value cannot be
    stored as Go writes it; `QueueingError` when the database fails. Nothing is
    written in any of these cases.
    """
    key = bytes(key)
    queue = keys.queue_of(key)
    if keys.is_legacy_key(key):
        raise EditRefused("a legacy aggregate row: a fetch splits it into one row each first")
    refusal = queue_refusal(queue)
    if refusal is not None:
        raise refusal
    connection = sql.connection()
    try:
        with transaction.atomic(using=connection.alias):
            old_value = _locked_value(key)
            if held is not None and held(key):
                raise EditConflict(
                    "a drain's handler holds the message right now; nothing was saved: "
                    "try again in a moment"
                )
            if not etag_matches(key, old_value, expected):
                raise EditConflict(
                    "the message changed since the form was opened (another edit, a retry "
                    "or a drain came first); nothing was saved: open it again"
                )
            old = editable_message(old_value)
            changes = tuple(changes_of(old, msg))
            _refuse_fixed(changes)
            if not changes:
                return Edited(key, etag_of(key, old_value), old, (), old)
            msg = msg.replace(queued_at=old.queued_at)
            left = redaction.left_behind(queue, old, msg)
            if left is not None:
                msg = msg.replace(extra=_rewritten(msg.extra, left))
                history.rewrite_errors(connection, key, left)
            value = _encoded(msg)
            archive.archive_rows(
                connection, queue, [(key, old_value)], ArchivedMessage.Reason.EDITED, actor
            )
            sql.write(
                connection,
                sql.statement(
                    connection,
                    "UPDATE {table} SET value = %s, signature = %s, due_at = NULL,"
                    " search_pending = 1 WHERE {key} = %s",
                ),
                (value, signature_of(msg.extra.get(LAST_ERROR_KEY), queue=queue, msgs=(msg,)), key),
            )
    except DatabaseError as exc:
        logger.exception("edit failed key=%s", key.hex())
        raise QueueingError("the edit failed in the database; nothing was saved") from exc
    logger.info("edited message queue=%s key=%s actor=%s", queue, key.hex(), actor)
    edited = Edited(key, etag_of(key, value), msg, changes, old)
    audit(user, edited)
    return edited


def _locked_value(key: bytes) -> bytes:
    """The row's bytes, locked until the commit: SQLite's write lock, a row lock
    elsewhere that never waits for a drain's handler (a row a drain holds is a
    conflict: its attempt is about to change it)."""
    connection = sql.connection()
    with connection.cursor() as cursor:
        sql.take_write_lock(connection, cursor, sql.table())
    rows = QueuedMessage.objects.using(conf.DATABASE)
    row = rows.locked_row(key, lock=sql.can_skip_locked(connection))
    if row is not None:
        return row[1]
    if rows.filter(key=key).exists():
        raise EditConflict(
            "a drain or another edit holds the message right now; nothing was saved: "
            "try again in a moment"
        )
    raise EditConflict("the message is gone (delivered, deleted or dropped); nothing was saved")


def _refuse_fixed(changes: tuple[Change, ...]) -> None:
    fixed = fixed_keys()
    for change in changes:
        if change.name == "queued_at":
            raise EditRefused("the first failure is kept: it anchors the age limit", "queued_at")
        name = change.name.removeprefix("extra.")
        if change.name.startswith("extra.") and name in fixed:
            raise EditRefused(f"{name!r} is not editable: {fixed[name]}", change.name)


def _rewritten(extra: dict[str, Any], rewrite: Callable[[str], str]) -> dict[str, Any]:
    """`extra` with its `LastError` through `rewrite` (`redaction.left_behind`)."""
    error = extra.get(LAST_ERROR_KEY)
    if not isinstance(error, str):
        return extra
    return {**extra, LAST_ERROR_KEY: rewrite(error)}


def _encoded(msg: Message) -> bytes:
    try:
        value = codec.encode_one(msg)
    except (codec.CodecError, TypeError, ValueError, OverflowError) as exc:
        text = str(exc)
        raise EditRefused(
            f"the Go format cannot hold it: {text}", "code" if "Code" in text else None
        ) from None
    if len(value) > conf.MAX_ROW_BYTES:
        raise EditRefused(
            f"the message would be {len(value):,} bytes stored, over "
            f"DEADLETTER_MAX_ROW_BYTES ({conf.MAX_ROW_BYTES:,})"
        )
    return value


_FIELDS = (
    ("subject", "subject"),
    ("username", "username"),
    ("code", "code"),
    ("timestamp", "timestamp"),
    ("queued_at", "queued_at"),
    ("descriptions", "descriptions"),
    ("fields", "fields"),
    ("skip_recipients", "skip_recipients"),
)


def changes_of(old: Message, new: Message) -> Iterator[Change]:
    """What differs between two messages, field by field then key by key, compared
    as stored (an offset or a float's width counts, `1` is not `1.0`)."""
    for name, attribute in _FIELDS:
        before, after = getattr(old, attribute), getattr(new, attribute)
        if not _same(before, after):
            yield Change(name, before, after)
    for name in dict.fromkeys([*old.extra, *new.extra]):
        before, after = old.extra.get(name, _MISSING), new.extra.get(name, _MISSING)
        if not _same(before, after):
            yield Change(
                f"extra.{name}",
                None if before is _MISSING else before,
                None if after is _MISSING else after,
            )


_MISSING = object()


def _same(a: Any, b: Any) -> bool:
    if a is _MISSING or b is _MISSING:
        return a is b
    if isinstance(a, GoTime | GoOnlyTime) or isinstance(b, GoTime | GoOnlyTime):
        return type(a) is type(b) and a.format() == b.format()
    try:
        return bool(cbor2.dumps(a, canonical=True) == cbor2.dumps(b, canonical=True))
    except (cbor2.CBOREncodeError, TypeError, ValueError):
        return bool(a == b)


def _field(msg: Message, name: str) -> Any:
    """The value a `Change` named `name` (`subject`, `extra.Key`) has in `msg`."""
    if name.startswith("extra."):
        return msg.extra.get(name.removeprefix("extra."))
    return getattr(msg, name)


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """A value as the audit log keeps it: times as Go's text, the rest as JSON
    (`jsonvalues`' form), cut to `limit` characters."""
    if value is None:
        text = "null"
    elif isinstance(value, GoTime | GoOnlyTime):
        text = value.format()
    else:
        text = json.dumps(jsonvalues.to_json(value), ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def audit(user: Any, edited: Edited) -> None:
    """A `LogEntry` naming `user` on the message, in its admin History: each
    changed field with its old and new value (cut), masked where `DEADLETTER_REDACT`
    masks it (whoever reads the History). Nothing without the admin app or a user."""
    if user is None or not apps.is_installed("django.contrib.admin"):
        return
    queue = keys.queue_of(edited.key)
    old = redaction.redacted(edited.old, queue, reveal=False)
    new = redaction.redacted(edited.msg, queue, reveal=False)
    parts = [
        f"{c.name}: {shown(_field(old, c.name))} → {shown(_field(new, c.name))}"
        for c in edited.changes
    ]
    text = "Edited: " + ("; ".join(parts) or "nothing changed")
    log_entry: Any = apps.get_model("admin", "LogEntry")
    log_entry.objects.log_actions(
        user_id=user.pk,
        queryset=[QueuedMessage(key=HexKey(edited.key))],
        action_flag=CHANGE_FLAG,
        change_message=text,
    )
