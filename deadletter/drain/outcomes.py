"""Outcome rules: what a handler's result does to its row (`deliver`); the
`Outcome` it returns and a run's tally live in `report`. The table of outcomes
is in docs/drain.md ("What a handler's result does"); this module is its code.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from deadletter import queue
from deadletter.drain.handlers import Handler
from deadletter.drain.policy import Policy, held_wait
from deadletter.drain.report import Outcome
from deadletter.drain.timeouts import HungHandlers, call_within
from deadletter.exceptions import NeedsOperator, PermanentFailure
from deadletter.queue import claims
from deadletter.queue.claims import dequeue_claimed, handler_savepoint
from deadletter.queue.rows import ATTEMPTS_KEY, LAST_ERROR_KEY, DropReason
from deadletter.wire import keys
from deadletter.wire.messages import Message

__all__ = [
    "HELD_MARK",
    "LAST_ERROR_LIMIT",
    "deliver",
    "held_error",
    "is_held",
    "last_error",
]

logger = logging.getLogger("deadletter")

LAST_ERROR_LIMIT = 1024
HELD_MARK = f"{NeedsOperator.__name__}: "
"""How `LastError` starts for a message kept for an operator, whatever the
subclass of `NeedsOperator` raised: what the admin and the causes go by."""


def deliver(
    item: queue.Queued,
    handler: Handler,
    *,
    max_attempts: int | None = None,
    claimed: bool = False,
    timeout: float | None = None,
    policy: Policy | None = None,
) -> Outcome:
    """Hand one message to `handler` and settle its row by what happened.

    * returns None: delivered, the row is dequeued;
    * returns a Message: partly delivered, it replaces the row as a fresh row
      at the tail (one transaction; `queued_at` kept from the original, since
      it anchors the age limit);
    * raises `PermanentFailure`: the row is dropped;
    * raises `NeedsOperator`: the row is kept for an operator, whatever the
      attempts limit: `LastError` says why (`HELD_MARK` first), `Attempts` is
      left as it was, and no drain hands it over again before `policy.held_wait`;
    * raises anything else: the row stays under its key with `Attempts` raised
      and `LastError` recorded, or is dropped once `max_attempts` is reached;
      under `policy`'s backoff it is not due again before the wait is over.

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
    try:
        if timeout is not None:
            result = call_within(handler, item.msg, timeout, key=item.key)
        elif claimed:
            with handler_savepoint():
                result = handler(item.msg)
        else:
            result = handler(item.msg)
        if result is not None and not isinstance(result, Message):
            raise TypeError(f"handler returned {type(result).__name__}, not a Message or None")
    except PermanentFailure as exc:
        logger.warning(
            "permanent failure queue=%s key=%s error=%s",
            keys.queue_of(item.key),
            item.key.hex(),
            last_error(exc),
        )
        return _settle(
            item,
            Outcome.PERMANENT,
            lambda: claims.drop_msg(item.key, item.msg, DropReason.PERMANENT),
        )
    except NeedsOperator as exc:
        return _held(item, exc, policy)
    except HungHandlers:
        raise
    except Exception as exc:
        if policy is not None:
            max_attempts = policy.max_attempts
        return _failed(item, exc, max_attempts, policy)
    if result is None:
        if claimed:
            dequeue_claimed(item.key)
        else:
            queue.dequeue(item.key)
        return Outcome.DELIVERED
    remainder = result.replace(queued_at=item.msg.queued_at or result.queued_at)
    return _settle(item, Outcome.REQUEUED, lambda: claims.replace_msg(item.key, remainder))


def _failed(
    item: queue.Queued, exc: Exception, max_attempts: int | None, policy: Policy | None
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
            error,
        )
        return _settle(
            item,
            Outcome.MAX_ATTEMPTS,
            lambda: claims.drop_msg(item.key, msg, DropReason.MAX_ATTEMPTS),
        )
    wait = policy.wait_seconds(attempts) if policy is not None else None
    due_at = None if wait is None else datetime.now(UTC) + timedelta(seconds=wait)
    logger.warning(
        "delivery failed queue=%s key=%s attempts=%s error=%s due_at=%s",
        name,
        item.key.hex(),
        attempts,
        error,
        due_at.isoformat() if due_at is not None else "now",
    )
    _settle(item, Outcome.FAILED, lambda: claims.rewrite_msg(item.key, msg, due_at=due_at))
    return Outcome.FAILED


def _held(item: queue.Queued, exc: NeedsOperator, policy: Policy | None) -> Outcome:
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
        error,
        due_at.isoformat(),
    )
    msg = item.msg.replace(extra=extra)
    return _settle(item, Outcome.HELD, lambda: claims.rewrite_msg(item.key, msg, due_at=due_at))


def _settle(item: queue.Queued, outcome: Outcome, write: Callable[[], object]) -> Outcome:
    """Apply an outcome's row change; if it cannot be written the row stays as
    it was, to be handed over again: the message counts as still failed."""
    try:
        write()
    except queue.QueueingError:
        logger.exception("could not settle message key=%s outcome=%s", item.key.hex(), outcome)
        return Outcome.FAILED
    return outcome


def last_error(exc: BaseException) -> str:
    """`ExcClass: message`, cut to `LAST_ERROR_LIMIT` UTF-8 bytes on a character boundary."""
    return _cut(f"{type(exc).__name__}: {exc}")


def held_error(exc: NeedsOperator) -> str:
    """The `LastError` of a message kept for an operator: `HELD_MARK` and why, cut
    as `last_error` cuts."""
    return _cut(f"{HELD_MARK}{exc}")


def is_held(error: str | None) -> bool:
    """Whether a `LastError` says its message waits for an operator (`held_error`)."""
    return isinstance(error, str) and error.startswith(HELD_MARK)


def _cut(text: str) -> str:
    raw = text.encode("utf-8", errors="replace")
    if len(raw) <= LAST_ERROR_LIMIT:
        return text
    return raw[:LAST_ERROR_LIMIT].decode("utf-8", errors="ignore")
