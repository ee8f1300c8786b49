"""Outcome rules: a message handed to its handler and the handler's result
turned into an outcome (`deliver`), with the `LastError` it records; what each
outcome writes to the row and its history is `settling`'s, the `Outcome` and a
run's tally `report`'s. The table of outcomes is in docs/drain.md ("What a
handler's result does"); this module and `settling` are its code.
"""

from __future__ import annotations

import contextlib
import time
from datetime import datetime

from deadletter import queue
from deadletter.drain import settling
from deadletter.drain.context import DeliveryContext, context_of
from deadletter.drain.handlers import Handler
from deadletter.drain.inflight import Journal
from deadletter.drain.policy import Policy
from deadletter.drain.report import Outcome
from deadletter.drain.settling import Tried, tried
from deadletter.drain.timeouts import HandlerTimeout, HungHandlers, call_within
from deadletter.exceptions import NeedsOperator, PermanentFailure
from deadletter.queue import history, tracing
from deadletter.queue.archive_write import ACTOR_DRAIN
from deadletter.queue.claim_transactions import handler_savepoint
from deadletter.queue.history import AttemptOutcome
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
        return settling.permanent(
            item, last_error(exc), tried(ran, actor), archive_actor=_archive_actor(actor)
        )
    except NeedsOperator as exc:
        return settling.held(item, held_error(exc), policy, tried(ran, actor))
    except HungHandlers:
        raise
    except Exception as exc:
        if policy is not None:
            max_attempts = policy.max_attempts
        kind = AttemptOutcome.TIMEOUT if isinstance(exc, HandlerTimeout) else AttemptOutcome.FAILED
        return settling.failed(
            item,
            last_error(exc),
            max_attempts,
            policy,
            tried(ran, actor),
            kind,
            archive_actor=_archive_actor(actor),
        )
    if result is None:
        return settling.delivered(item, claimed=claimed, ran=ran, actor=actor)
    return settling.requeued(item, result, tried(ran, actor))


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
    return settling.failed(
        item,
        last_error(exc),
        max_attempts,
        policy,
        Tried(at, None, actor),
        AttemptOutcome.KILLED,
        archive_actor=_archive_actor(actor),
    )


def _archive_actor(actor: str) -> str:
    """Who the archive names for a drop: the user of a retry (`retry:<user>`), else the drain."""
    user = actor.removeprefix(RETRY_ACTOR)
    return user if user != actor and user else ACTOR_DRAIN


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
