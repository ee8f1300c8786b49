"""Attempts whose handler's process died (SIGKILL, the OOM killer), as a drain's
pass finds them in dead processes' journals (`inflight`): each is a failed
attempt, and a message whose handler has killed its process `DEADLETTER_MAX_KILLS`
times is set aside, archived as `killed`, so the messages behind it are handed
over. Without that, under the default settings (no attempt limit, no backoff), the
oldest message would be taken first by every drain and end each one, for ever.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from django.db import DatabaseError, transaction

from deadletter import queue
from deadletter.conf import conf
from deadletter.drain.inflight import Killed
from deadletter.drain.outcomes import HandlerKilled, last_error, settle_killed
from deadletter.drain.policy import Policy
from deadletter.drain.report import Outcome
from deadletter.models import ArchivedMessage, Attempt
from deadletter.queue import archive_write, history
from deadletter.queue.history import KEEP, AttemptOutcome
from deadletter.queue.rows import ATTEMPTS_KEY, LAST_ERROR_KEY, delete_sql
from deadletter.store import sql
from deadletter.wire import codec, keys

__all__ = ["DEFAULT_MAX_KILLS", "KILLED", "kills_of", "max_kills", "max_kills_problem", "settle"]

logger = logging.getLogger("deadletter")

DEFAULT_MAX_KILLS = 3
KILLED = ArchivedMessage.Reason.KILLED
"""The archive's reason for a message set aside because its handler killed its process."""


def max_kills_problem(value: Any) -> str | None:
    """What is wrong with `DEADLETTER_MAX_KILLS` (E030), or None: kills are counted
    in a message's kept history, its newest `history.KEEP` attempts."""
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= KEEP:
        return f"DEADLETTER_MAX_KILLS must be an int from 1 to {KEEP}, got {value!r}"
    return None


def max_kills() -> int:
    """`DEADLETTER_MAX_KILLS`; the default while the setting is wrong (the drain
    refuses to start then, and check E030 says why)."""
    value = conf.MAX_KILLS
    return DEFAULT_MAX_KILLS if max_kills_problem(value) is not None else value


def kills_of(key: bytes) -> int:
    """How many of `key`'s kept attempts (`history`) ended with its handler's process."""
    attempts = Attempt.objects.using(conf.DATABASE)
    return attempts.filter(key=bytes(key), outcome=AttemptOutcome.KILLED).count()


def settle(item: queue.Queued, killed: Killed, policy: Policy | None) -> Outcome | str:
    """Count the attempt `killed` (its handler's process died) of `item`, the row in
    the caller's claim on a server: a failed attempt as any (`outcomes.settle_killed`),
    or, when it is the message's `max_kills()`-th (and not its last by the queue's
    attempt limit, which drops it as any), the message set aside: archived as
    `killed` with the attempt in its history, in one transaction (the caller's). A
    queue whose archive is off drops it as at its attempt limit instead."""
    kills = kills_of(item.key) + 1
    limit = policy.max_attempts if policy is not None else None
    if kills < max_kills() or (limit is not None and item.attempts + 1 >= limit):
        return settle_killed(
            item, at=killed.started_at, actor=killed.actor, pid=killed.pid, policy=policy
        )
    name = keys.queue_of(item.key)
    if not archive_write.enabled(name):
        last = dataclasses.replace(policy or Policy(path=""), max_attempts=item.attempts + 1)
        return settle_killed(
            item, at=killed.started_at, actor=killed.actor, pid=killed.pid, policy=last
        )
    attempts = item.attempts + 1
    error = last_error(
        HandlerKilled(
            f"the handler's process (pid {killed.pid}) died while it ran, the {kills}th time; "
            "set aside (DEADLETTER_MAX_KILLS)"
        )
    )
    msg = item.msg.replace(extra={**item.msg.extra, ATTEMPTS_KEY: attempts, LAST_ERROR_KEY: error})
    connection = sql.connection()
    try:
        value = codec.encode_one(msg)
        with transaction.atomic(using=connection.alias, savepoint=False):
            if not sql.write(connection, delete_sql(connection), (item.key,)):
                return "gone"
            archive_write.archive_rows(
                connection, name, [(item.key, value)], KILLED, archive_write.ACTOR_DRAIN
            )
            history.record_attempt(
                connection,
                item.key,
                at=killed.started_at,
                duration=None,
                outcome=AttemptOutcome.KILLED,
                error=error,
                actor=killed.actor,
                attempts=attempts,
            )
    except (DatabaseError, codec.CodecError, TypeError, ValueError):
        logger.exception("could not set aside a killing message key=%s", item.key.hex())
        return Outcome.FAILED
    logger.error(
        "message set aside: its handler killed its process queue=%s key=%s kills=%s",
        name,
        item.key.hex(),
        kills,
    )
    return KILLED
