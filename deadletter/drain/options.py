"""What a drain run is asked to do (`DrainOptions`), checked once where it is
made, so the command, the admin, the API and the benches build a `Drainer` from
one small value instead of a long argument list."""

from __future__ import annotations

import dataclasses

from deadletter.drain.concurrency import MAX_CONCURRENCY
from deadletter.drain.errors import DrainConfigError

__all__ = ["DrainOptions"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DrainOptions:
    """A run's options; a value out of range is `DrainConfigError` when it is made.

    `limit` bounds the messages handed over, `rate` the messages a second (split
    among the `workers` processes). `wait` waits for another drain's SQLite lock
    instead of failing. `batch_size` is SQLite's page of rows. `budget` (seconds
    from `run()`) bounds a run started from the web: nothing is handed over after
    it and a handler still running then is given up on. `grace` is what a worker
    process waits for the message in hand after a stop signal. `ignore_backoff`
    (an operator's "now") hands every message over in key order, waiting or not.
    `concurrency` is how many messages one process has in hand at once, each
    handler in a thread of its own (for slow handlers; `delivery.Delivery`).
    `actor` is who the run's failed attempts are recorded as (`queue.history`):
    `drain`, `service` for `--forever`.
    """

    limit: int | None = None
    rate: float | None = None
    workers: int = 1
    wait: bool = False
    batch_size: int = 500
    budget: float | None = None
    grace: float | None = None
    ignore_backoff: bool = False
    concurrency: int = 1
    actor: str = "drain"

    def __post_init__(self) -> None:
        if self.limit is not None and self.limit < 1:
            raise DrainConfigError(f"limit must be at least 1, got {self.limit}")
        if self.rate is not None and not self.rate > 0:
            raise DrainConfigError(f"rate must be above 0 per second, got {self.rate}")
        if self.workers < 1:
            raise DrainConfigError(f"workers must be at least 1, got {self.workers}")
        if not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise DrainConfigError(
                f"concurrency must be from 1 to {MAX_CONCURRENCY}, got {self.concurrency}"
            )
        if self.batch_size < 1:
            raise DrainConfigError(f"batch_size must be at least 1, got {self.batch_size}")
        if not self.actor:
            raise DrainConfigError("actor must name who drains, got an empty one")
        if self.budget is not None and not self.budget >= 0:
            raise DrainConfigError(f"budget must be at least 0 seconds, got {self.budget}")
