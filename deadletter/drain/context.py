"""The delivery context: what a handler that takes a second argument is told about
the attempt (`handle(msg, ctx)`), built by the one place that calls handlers
(`outcomes.deliver`, and a lane's call on SQLite)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from deadletter import queue
from deadletter.queue.moves import origin_of
from deadletter.queue.tracing import TRACEPARENT_KEY
from deadletter.wire import keys

__all__ = ["DeliveryContext", "context_of"]


@dataclasses.dataclass(frozen=True, slots=True)
class DeliveryContext:
    """One attempt as its handler sees it.

    `key`: the message's row key in hex, the same over its attempts, restores and
    redrives (a moved message keeps the key it was first parked under, in
    `Origin`): an idempotency key. `attempt`: 1 for the first (its `Attempts` + 1).
    `first_failure`: its `queued_at` (None only for a time `datetime` cannot
    hold, `GoOnlyTime`, written by a Go program). `queue`: the queue it is delivered from.
    `deadline`: when the handler's time limit runs out, or None without one.
    `traceparent`: the W3C trace context of the span active when it was parked,
    or None.
    """

    key: str
    attempt: int
    first_failure: datetime | None
    queue: str
    deadline: datetime | None
    traceparent: str | None


def context_of(item: queue.Queued, seconds: float | None) -> DeliveryContext:
    """The context of the attempt about to start on `item`, whose handler may run
    `seconds` (None: no limit)."""
    now = datetime.now(UTC)
    queued_at = item.msg.queued_at
    traceparent = item.msg.extra.get(TRACEPARENT_KEY)
    return DeliveryContext(
        key=origin_of(item.key, item.msg),
        attempt=item.attempts + 1,
        first_failure=queued_at if isinstance(queued_at, datetime) else None,
        queue=keys.queue_of(item.key),
        deadline=None if seconds is None else now + timedelta(seconds=seconds),
        traceparent=traceparent if isinstance(traceparent, str) else None,
    )
