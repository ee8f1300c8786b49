"""What each outcome of a handler writes (`outcomes.deliver` decides which):
the row's change and the attempt's history row, in one transaction; a row
edited while its handler ran is left as it is, with a note in its history.
The table of outcomes is in docs/drain.md ("What a handler's result does").
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from django.db import DatabaseError, transaction

from deadletter import queue
from deadletter.drain.policy import Policy, held_wait
from deadletter.drain.report import Outcome
from deadletter.queue import archive_write, history, redaction, settlements
from deadletter.queue.history import AttemptOutcome
from deadletter.queue.rows import ATTEMPTS_KEY, LAST_ERROR_KEY, DropReason
from deadletter.queue.settlements import CHANGED, dequeue_claimed
from deadletter.store import reconnect, sql
from deadletter.wire import keys
from deadletter.wire.messages import Message

__all__ = ["Tried", "delivered", "failed", "held", "permanent", "requeued", "tried"]

logger = logging.getLogger("deadletter")


@dataclasses.dataclass(frozen=True, slots=True)
class Tried:
    """One attempt, for its history row: when it began, how long the handler ran, who."""

    at: datetime
    duration: float | None
    actor: str


def tried(ran: float | None, actor: str) -> Tried:
    """The attempt that just ended after `ran` seconds."""
    duration = ran or 0.0
    return Tried(datetime.now(UTC) - timedelta(seconds=duration), duration, actor)


def permanent(item: queue.Queued, error: str, attempt: Tried, *, archive_actor: str) -> Outcome:
    """A `PermanentFailure` (`error`, its `LastError`): the row dropped (archived
    as by `archive_actor`)."""
    logger.warning(
        "permanent failure queue=%s key=%s error=%s",
        keys.queue_of(item.key),
        item.key.hex(),
        _logged(error, item),
    )
    return _dropped(
        item, item.msg, DropReason.PERMANENT, attempt, error, item.attempts + 1, archive_actor
    )


def delivered(item: queue.Queued, *, claimed: bool, ran: float | None, actor: str) -> Outcome:
    """The handler returned None: the row dequeued and, when it had failed
    before, its attempts' history deleted with it. With `claimed` in the
    caller's claim transaction, a `DatabaseError` passing through to roll it
    back."""
    failed_before = LAST_ERROR_KEY in item.msg.extra
    if claimed:
        if dequeue_claimed(item.key) and failed_before:
            history.forget(sql.connection(), item.key)
    elif _dequeue_handed(item, failed_before) is CHANGED:
        _note_changed(item, Outcome.DELIVERED, tried(ran, actor))
    return Outcome.DELIVERED


def requeued(item: queue.Queued, result: Message, attempt: Tried) -> Outcome:
    """The handler returned a Message: it replaces the row as a fresh row at the
    tail, `queued_at` kept from the original (it anchors the age limit), the
    history following it to its new key."""
    remainder = result.replace(queued_at=item.msg.queued_at or result.queued_at)
    if LAST_ERROR_KEY not in item.msg.extra:
        return _settle(
            item,
            Outcome.REQUEUED,
            lambda: settlements.replace_msg(item.key, remainder, handed=item.msg),
            attempt,
        )
    return _settle(item, Outcome.REQUEUED, lambda: _replace_with_history(item, remainder), attempt)


def failed(
    item: queue.Queued,
    error: str,
    max_attempts: int | None,
    policy: Policy | None,
    attempt: Tried,
    kind: AttemptOutcome,
    *,
    archive_actor: str,
) -> Outcome:
    """A failed attempt (`error`, its `LastError`): `Attempts` raised and the
    error recorded, the row due again after `policy`'s backoff; or, at
    `max_attempts`, dropped (archived as by `archive_actor`)."""
    attempts = item.attempts + 1
    extra = dict(item.msg.extra)
    extra[ATTEMPTS_KEY] = attempts
    extra[LAST_ERROR_KEY] = error
    msg = item.msg.replace(extra=extra)
    name = keys.queue_of(item.key)
    if max_attempts is not None and attempts >= max_attempts:
        logger.warning(
            "dropping message after max attempts queue=%s key=%s attempts=%s error=%s",
            name,
            item.key.hex(),
            attempts,
            _logged(error, item),
        )
        return _dropped(item, msg, DropReason.MAX_ATTEMPTS, attempt, error, attempts, archive_actor)
    wait = policy.wait_seconds(attempts) if policy is not None else None
    due_at = None if wait is None else datetime.now(UTC) + timedelta(seconds=wait)
    logger.warning(
        "delivery failed queue=%s key=%s attempts=%s error=%s due_at=%s",
        name,
        item.key.hex(),
        attempts,
        _logged(error, item),
        due_at.isoformat() if due_at is not None else "now",
    )
    _settle(
        item,
        Outcome.FAILED,
        _recorded(
            item.key,
            lambda: settlements.rewrite_msg(item.key, msg, due_at=due_at, handed=item.msg),
            attempt,
            kind,
            error,
            attempts,
        ),
        attempt,
        error,
    )
    return Outcome.FAILED


def held(item: queue.Queued, error: str, policy: Policy | None, attempt: Tried) -> Outcome:
    """Keep the row for an operator (`error`, its `LastError`): `Attempts` stays
    as it was, so a message held for days is not dropped by the limit at its
    first ordinary failure after the fix."""
    attempts = item.attempts
    extra = {**item.msg.extra, LAST_ERROR_KEY: error}
    due_at = datetime.now(UTC) + timedelta(seconds=held_wait(policy, attempts + 1))
    logger.warning(
        "message kept for an operator queue=%s key=%s attempts=%s error=%s due_at=%s",
        keys.queue_of(item.key),
        item.key.hex(),
        attempts,
        _logged(error, item),
        due_at.isoformat(),
    )
    msg = item.msg.replace(extra=extra)
    return _settle(
        item,
        Outcome.HELD,
        _recorded(
            item.key,
            lambda: settlements.rewrite_msg(item.key, msg, due_at=due_at, handed=item.msg),
            attempt,
            AttemptOutcome.HELD,
            error,
            None,
        ),
        attempt,
        error,
    )


_DROPS = {
    DropReason.PERMANENT: (Outcome.PERMANENT, AttemptOutcome.PERMANENT),
    DropReason.MAX_ATTEMPTS: (Outcome.MAX_ATTEMPTS, AttemptOutcome.MAX_ATTEMPTS),
}
"""A drop's outcome and its history row's, by why the message was dropped."""


def _dropped(
    item: queue.Queued,
    msg: Message,
    reason: DropReason,
    attempt: Tried,
    error: str,
    attempts: int,
    archive_actor: str,
) -> Outcome:
    """The row dropped, `msg` archived as by `archive_actor` when its queue
    archives, with the attempt's history row (or the key's history gone with it)."""
    outcome, kind = _DROPS[reason]
    return _settle(
        item,
        outcome,
        _recorded(
            item.key,
            lambda: settlements.drop_msg(
                item.key, msg, reason, actor=archive_actor, error=error, handed=item.msg
            ),
            attempt,
            kind,
            error,
            attempts,
            gone=_gone(item),
        ),
        attempt,
        error,
    )


def _gone(item: queue.Queued) -> bool | None:
    """For a drop: None when the queue archives it (its history stays, read by key);
    else whether it has a history to delete with it (it failed before)."""
    if archive_write.enabled(keys.queue_of(item.key)):
        return None
    return LAST_ERROR_KEY in item.msg.extra


def _recorded(
    key: bytes,
    change: Callable[[], object],
    attempt: Tried,
    outcome: AttemptOutcome,
    error: str,
    attempts: int | None,
    *,
    gone: bool | None = None,
) -> Callable[[], object]:
    """The row's `change` and, when it found the row, the attempt's history row, in
    one transaction: the caller's (a claim's) or one of their own. A history row
    that cannot be written undoes the change (`QueueingError`). `gone` (a drop from
    a queue whose archive is off: the message leaves for good) deletes the key's
    history instead when it had one (True), or writes nothing (False)."""

    def write() -> object:
        connection = sql.connection()
        with transaction.atomic(using=connection.alias, savepoint=False):
            changed = change()
            if changed and gone is not None:
                try:
                    if gone:
                        history.forget(connection, key)
                except DatabaseError as exc:
                    logger.exception("could not forget attempts key=%s", key.hex())
                    raise queue.QueueingError from exc
            elif changed:
                try:
                    history.record_attempt(
                        connection,
                        key,
                        at=attempt.at,
                        duration=attempt.duration,
                        outcome=outcome,
                        error=error,
                        actor=attempt.actor,
                        attempts=attempts,
                    )
                except DatabaseError as exc:
                    logger.exception("could not record attempt key=%s", key.hex())
                    raise queue.QueueingError from exc
        return changed

    return write


def _dequeue_handed(item: queue.Queued, failed_before: bool) -> bool | settlements.Changed:
    """Delete a delivered row that still holds the message handed over, and, when it
    had failed before, its history in the same transaction; a database error is
    logged (the row stays, to be handed over again)."""
    connection = sql.connection()
    try:
        if not failed_before:
            return settlements.dequeue_handed(item.key, item.msg)
        with transaction.atomic(using=connection.alias):
            deleted = settlements.dequeue_handed(item.key, item.msg)
            if deleted:
                history.forget(connection, item.key)
        return deleted
    except DatabaseError:
        logger.exception("dequeue failed key=%s", item.key.hex())
        reconnect.close_if_lost(connection)
        return False


def _replace_with_history(
    item: queue.Queued, remainder: Message
) -> bytes | None | settlements.Changed:
    """`settlements.replace_msg`, the history following the remainder to its new key."""
    connection = sql.connection()
    with transaction.atomic(using=connection.alias, savepoint=False):
        new_key = settlements.replace_msg(item.key, remainder, handed=item.msg)
        if isinstance(new_key, bytes):
            try:
                history.move(connection, item.key, new_key)
            except DatabaseError as exc:
                logger.exception("could not move attempts key=%s", item.key.hex())
                raise queue.QueueingError from exc
    return new_key


def _settle(
    item: queue.Queued,
    outcome: Outcome,
    write: Callable[[], object],
    attempt: Tried,
    error: str = "",
) -> Outcome:
    """Apply an outcome's row change; if it cannot be written the row stays as
    it was, to be handed over again: the message counts as still failed. A row
    that changed while the handler ran (an edit) is left as it is, with a note."""
    try:
        written = write()
    except queue.QueueingError:
        logger.exception("could not settle message key=%s outcome=%s", item.key.hex(), outcome)
        return Outcome.FAILED
    if written is CHANGED:
        _note_changed(item, outcome, attempt, error)
    return outcome


def _note_changed(item: queue.Queued, outcome: Outcome, attempt: Tried, error: str = "") -> None:
    """The message's History says why its attempt changed nothing: the row was
    edited while the handler ran, so the outcome (of the message as it was) is not
    applied to the edited one, which waits for the next pass. Logged when it cannot
    be written: the row is intact either way."""
    ended = f"{outcome}: {error}" if error else str(outcome)
    text = (
        f"Edited while its handler ran; the attempt ({ended}) was of the message as it "
        "was before the edit and was not applied: the edited message waits for the next pass"
    )
    logger.warning(
        "row changed while its handler ran; left for the next pass queue=%s key=%s outcome=%s",
        keys.queue_of(item.key),
        item.key.hex(),
        outcome,
    )
    connection = sql.connection()
    try:
        with transaction.atomic(using=connection.alias):
            history.record_attempt(
                connection,
                item.key,
                at=attempt.at,
                duration=attempt.duration,
                outcome=AttemptOutcome.CHANGED,
                error=text,
                actor=attempt.actor,
            )
    except DatabaseError:
        logger.exception("could not note the changed row key=%s", item.key.hex())


def _logged(error: str, item: queue.Queued) -> str:
    """An error as the log says it: whoever reads the log may not see what
    `DEADLETTER_REDACT` masks, so the message's redacted values are masked in it."""
    return redaction.scrubber(keys.queue_of(item.key), (item.msg,), reveal=False)(error)
