"""Per-queue policy: how the drain retries a queue's messages (attempts, backoff,
breaker), from its settings as `queue.config` reads and checks them.
"""

from __future__ import annotations

import dataclasses
import random

from deadletter.queue.config import QueueConfig, handler_path

__all__ = [
    "HELD_WAIT",
    "Policy",
    "handler_path",
    "held_wait",
    "policy_of",
]

JITTER = 0.1  # a backoff's wait is spread by up to this share either way
HELD_WAIT = 3600.0
"""Seconds a message kept for an operator (`NeedsOperator`) waits before a drain
hands it over again when its queue has no backoff: an operator's fix (a deploy,
a key back in SECRET_KEY_FALLBACKS) takes a while, and `--forever` must not ask
every pass. The admin's Retry now does not wait."""


@dataclasses.dataclass(frozen=True, slots=True)
class Policy:
    """One queue's handler path and limits, each resolved against its default.

    `backoff` is `(first, max)` seconds: after a failed attempt that leaves
    `Attempts` = n the message waits `min(max, first * 2 ** (n - 1))`, give or
    take `JITTER`. `breaker` K stops the queue for the rest of a pass after K
    failed attempts in a row.
    """

    path: str
    max_attempts: int | None = None
    backoff: tuple[float, float] | None = None
    breaker: int | None = None

    def wait_seconds(self, attempts: int, rng: random.Random | None = None) -> float | None:
        """How long a message waits after its `attempts`-th failure; None: no backoff."""
        if self.backoff is None or attempts < 1:
            return None
        first, most = self.backoff
        wait = most if attempts > 64 else min(most, first * 2 ** (attempts - 1))
        spread = (rng or random).uniform(-JITTER, JITTER)
        return max(0.0, wait * (1 + spread))


def held_wait(policy: Policy | None, attempts: int) -> float:
    """Seconds before a message kept for an operator is handed over again: its
    queue's backoff wait after `attempts`, else `HELD_WAIT`."""
    wait = policy.wait_seconds(attempts) if policy is not None else None
    return HELD_WAIT if wait is None else wait


def policy_of(config: QueueConfig) -> Policy:
    """The drain's reading of a queue's settings (checked before: `handler_problems`)."""
    return Policy(
        path=config.handler,
        max_attempts=config.max_attempts,
        backoff=config.backoff,
        breaker=config.breaker,
    )
