"""Outcome rules: what a handler's result does to its row (`deliver`); the
`Outcome` it returns and a run's tally live in `report`. The table of outcomes
is in docs/drain.md ("What a handler's result does"); this module is its code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from django.db import DatabaseError, transaction

from deadletter import queue
from deadletter.drain.context import DeliveryContext, context_of
from deadletter.drain.handlers import Handler
from deadletter.drain.inflight import Journal
from deadletter.drain.policy import Policy, held_wait
from deadletter.drain.report import Outcome
from deadletter.drain.timeouts import HandlerTimeout, HungHandlers, call_within
from deadletter.exceptions import NeedsOperator, PermanentFailure
from deadletter.queue import archive_write, history, redaction, settlements, tracing
from deadletter.queue.archive_write import ACTOR_DRAIN
from deadletter.queue.claim_transactions import handler_savepoint
from deadletter.queue.history import AttemptOutcome
from deadletter.queue.rows import ATTEMPTS_KEY, LAST_ERROR_KEY, DropReason
from deadletter.queue.settlements import CHANGED, dequeue_claimed
from deadletter.store import reconnect, sql
from deadletter.wire import keys
from deadletter.wire.messages import Message

__all__ = [
    "HELD_MARK",
    "LAST_ERROR_LIMIT",
    "HandlerKilled",
    "deliver",
    "held_error",
    "is_held",
    "last_error",
    "settle_killed",
]

logger = logging.getLogger("deadletter")

LAST_ERROR_LIMIT = history.ERROR_LIMIT
RETRY_ACTOR = "retry:"
"""How an operator's retry names its user in the history: `retry:<user name>`."""
HELD_MARK = f"{NeedsOperator.__name__}: "
"""How `LastError` starts for a message kept for an operator, whatever the
subclass of `NeedsOperator` raised: what the admin and the causes go by."""


_NO_SPAN: contextlib.nullcontext[None] = contextlib.nullcontext()


class HandlerKilled(Exception):
    """The handler's process died while it ran (SIGKILL, the OOM killer): a failed
    attempt, counted by the next drain from the dead process's journal (`inflight`)."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Try:
    """One attempt, for its history row: when it began, how long the handler ran, who."""

    at: datetime
    duration: float | None
    actor: str


def deliver(
    item: queue.Queued,
    handler: Handler,
    *,
    max_attempts: int | None = None,
    claimed: bool = False,
    timeout: float | None = None,
    policy: Policy | None = None,
    actor: str = "drain",
    journal: Journal | None = None,
    replayed: float | None = None,
    takes_context: bool = False,
) -> Outcome:
    """Hand one message to `handler` and settle its row by what happened.

    With `takes_context` it is called `handler(msg, ctx)`, `ctx` the attempt's
    `DeliveryContext`. With the `otel` extra and a tracer provider set, the attempt
    is a `deadletter.deliver` span (`queue.tracing`), current while the handler
    runs, with its outcome.

    * returns None: delivered, the row is dequeued (and, when it had failed
      before, its attempts' history deleted in the same transaction);
    * returns a Message: partly delivered, it replaces the row as a fresh row
      at the tail (one transaction; `queued_at` kept from the original, since
      it anchors the age limit; the history follows it to its new key);
    * raises `PermanentFailure`: the row is dropped;
    * raises `NeedsOperator`: the row is kept for an operator, whatever the
      attempts limit: `LastError` says why (`HELD_MARK` first), `Attempts` is
      left as it was, and no drain hands it over again before `policy.held_wait`;
    * raises anything else: the row stays under its key with `Attempts` raised
      and `LastError` recorded, or is dropped once `max_attempts` is reached;
      under `policy`'s backoff it is not due again before the wait is over.

    Every outcome but a delivery adds an attempt to the key's history
    (`queue.history`), by `actor`, in the transaction of the row's change.
    With `journal` the key is journaled while the handler runs (`inflight`), so a
    kill of the process counts; `replayed` (seconds) says the handler already ran
    elsewhere for that long (a lane's, journaled there) and `handler` replays it.

    `policy` (the queue's) gives `max_attempts` and the backoff.

    With `claimed` (the caller holds the row in its claim transaction) the
    handler runs under `handler_savepoint`, so database writes of a failing
    handler are undone while the failure is still recorded, and a delivered
    row is deleted in that transaction with no savepoint of its own: a
    `DatabaseError` then passes through, for the caller's transaction to roll
    the claim back. A `BaseException` (`DrainAborted`) passes through and
    leaves the row as it was.

    With `timeout` (seconds) the handler runs in a thread of its own
    (`timeouts.call_within`) and one that has not returned by then is a failed
    attempt (`HandlerTimeout`), settled at once; its database writes go through
    that thread's connection, outside the caller's transaction and savepoint.
    `HungHandlers` passes through before the handler starts, the row untouched.
    """
    traced = tracing.ENABLED and tracing.spans_on()
    context = context_of(item, timeout) if takes_context or traced else None
    span: contextlib.AbstractContextManager[tracing.Attempt | None] = _NO_SPAN
    if context is not None and traced:
        span = tracing.attempt_span(
            queue=context.queue,
            key=context.key,
            attempt=context.attempt,
            traceparent=context.traceparent,
            ran=replayed,
        )
    with span as attempt:
        outcome = _deliver(
            item,
            handler,
            context if takes_context else None,
            max_attempts,
            claimed,
            timeout,
            policy,
            actor,
            journal,
            replayed,
        )
        if attempt is not None:
            attempt.outcome(outcome.value)
    return outcome


def _deliver(
    item: queue.Queued,
    handler: Handler,
    context: DeliveryContext | None,
    max_attempts: int | None,
    claimed: bool,
    timeout: float | None,
    policy: Policy | None,
    actor: str,
    journal: Journal | None,
    replayed: float | None,
) -> Outcome:
    """`deliver`'s rules; `context`, when given, is the handler's second argument."""
    ran = replayed
    slot = None
    if journal is not None and replayed is None:
        slot = journal.enter(item.key, actor.encode())
    started = time.monotonic()
    try:
        try:
            if timeout is not None:
                result = call_within(handler, item.msg, timeout, key=item.key, context=context)
            else:
                with handler_savepoint():
                    result = handler(item.msg) if context is None else handler(item.msg, context)
        finally:
            if ran is None:
                ran = time.monotonic() - started
            if journal is not None:
                journal.leave(slot)
        if result is not None and not isinstance(result, Message):
            raise TypeError(f"handler returned {type(result).__name__}, not a Message or None")
    except PermanentFailure as exc:
        error = last_error(exc)
        logger.warning(
            "permanent failure queue=%s key=%s error=%s",
            keys.queue_of(item.key),
            item.key.hex(),
            _logged(error, item),
        )
        attempt = _tried(ran, actor)
        return _settle(
            item,
            Outcome.PERMANENT,
            _recorded(
                item.key,
                lambda: settlements.drop_msg(
                    item.key,
                    item.msg,
                    DropReason.PERMANENT,
                    actor=_archive_actor(attempt.actor),
                    error=error,
                    handed=item.msg,
                ),
                attempt,
                AttemptOutcome.PERMANENT,
                error,
                item.attempts + 1,
                gone=_gone(item),
            ),
            attempt,
            error,
        )
    except NeedsOperator as exc:
        return _held(item, exc, policy, _tried(ran, actor))
    except HungHandlers:
        raise
    except Exception as exc:
        if policy is not None:
            max_attempts = policy.max_attempts
        kind = AttemptOutcome.TIMEOUT if isinstance(exc, HandlerTimeout) else AttemptOutcome.FAILED
        return _failed(item, exc, max_attempts, policy, _tried(ran, actor), kind)
    failed_before = LAST_ERROR_KEY in item.msg.extra
    if result is None:
        if claimed:
            if dequeue_claimed(item.key) and failed_before:
                history.forget(sql.connection(), item.key)
        elif _dequeue_handed(item, failed_before) is CHANGED:
            _note_changed(item, Outcome.DELIVERED, _tried(ran, actor))
        return Outcome.DELIVERED
    remainder = result.replace(queued_at=item.msg.queued_at or result.queued_at)
    attempt = _tried(ran, actor)
    if not failed_before:
        return _settle(
            item,
            Outcome.REQUEUED,
            lambda: settlements.replace_msg(item.key, remainder, handed=item.msg),
            attempt,
        )
    return _settle(item, Outcome.REQUEUED, lambda: _replace_with_history(item, remainder), attempt)


def settle_killed(
    item: queue.Queued, *, at: datetime, actor: str, pid: int, policy: Policy | None
) -> Outcome:
    """Count the attempt whose handler's process died (`inflight.recover`): as any
    failed attempt, `Attempts` raised and `LastError` recorded, or dropped at the
    queue's attempt limit; its history row says `killed`."""
    exc = HandlerKilled(
        f"the handler's process (pid {pid}) died while it ran; SIGKILL or out of memory?"
    )
    max_attempts = policy.max_attempts if policy is not None else None
    return _failed(item, exc, max_attempts, policy, _Try(at, None, actor), AttemptOutcome.KILLED)


def _gone(item: queue.Queued) -> bool | None:
    """For a drop: None when the queue archives it (its history stays, read by key);
    else whether it has a history to delete with it (it failed before)."""
    if archive_write.enabled(keys.queue_of(item.key)):
        return None
    return LAST_ERROR_KEY in item.msg.extra


def _archive_actor(actor: str) -> str:
    """Who the archive names for a drop: the user of a retry (`retry:<user>`), else the drain."""
    user = actor.removeprefix(RETRY_ACTOR)
    return user if user != actor and user else ACTOR_DRAIN


def _tried(ran: float | None, actor: str) -> _Try:
    """The attempt that just ended after `ran` seconds."""
    duration = ran or 0.0
    return _Try(datetime.now(UTC) - timedelta(seconds=duration), duration, actor)


def _recorded(
    key: bytes,
    change: Callable[[], object],
    attempt: _Try,
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


def _failed(
    item: queue.Queued,
    exc: Exception,
    max_attempts: int | None,
    policy: Policy | None,
    attempt: _Try,
    kind: AttemptOutcome,
) -> Outcome:
    attempts = item.attempts + 1
    error = last_error(exc)
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
        return _settle(
            item,
            Outcome.MAX_ATTEMPTS,
            _recorded(
                item.key,
                lambda: settlements.drop_msg(
                    item.key,
                    msg,
                    DropReason.MAX_ATTEMPTS,
                    actor=_archive_actor(attempt.actor),
                    error=error,
                    handed=item.msg,
                ),
                attempt,
                AttemptOutcome.MAX_ATTEMPTS,
                error,
                attempts,
                gone=_gone(item),
            ),
            attempt,
            error,
        )
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


def _held(item: queue.Queued, exc: NeedsOperator, policy: Policy | None, attempt: _Try) -> Outcome:
    """Keep the row for an operator: `Attempts` stays as it was, so a message held
    for days is not dropped by the limit at its first ordinary failure after the fix."""
    attempts = item.attempts
    error = held_error(exc)
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


def _settle(
    item: queue.Queued,
    outcome: Outcome,
    write: Callable[[], object],
    attempt: _Try,
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


def _note_changed(item: queue.Queued, outcome: Outcome, attempt: _Try, error: str = "") -> None:
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


def last_error(exc: BaseException) -> str:
    """`ExcClass: message`, cut to `LAST_ERROR_LIMIT` UTF-8 bytes on a character boundary."""
    return history.cut(f"{type(exc).__name__}: {exc}")


def held_error(exc: NeedsOperator) -> str:
    """The `LastError` of a message kept for an operator: `HELD_MARK` and why, cut
    as `last_error` cuts."""
    return history.cut(f"{HELD_MARK}{exc}")


def is_held(error: str | None) -> bool:
    """Whether a `LastError` says its message waits for an operator (`held_error`)."""
    return isinstance(error, str) and error.startswith(HELD_MARK)
