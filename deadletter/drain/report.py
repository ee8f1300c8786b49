"""What a run reports: the `Outcome` of one message and a run's tally
(`DrainReport`). A leaf of `drain/`, importing none of it, so the errors, the
loop and the edges all type against it without a cycle.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from deadletter.queue.rows import DropReason

__all__ = ["DROP_REASONS", "DrainReport", "Outcome"]

DROP_REASONS = tuple(str(reason) for reason in DropReason)


class Outcome(enum.StrEnum):
    DELIVERED = "delivered"
    REQUEUED = "requeued"
    FAILED = "failed"
    HELD = "held"
    PERMANENT = "permanent"
    MAX_ATTEMPTS = "max_attempts"
    EXPIRED = "expired"
    CORRUPT = "corrupt"


@dataclasses.dataclass
class DrainReport:
    """What one run did; `exit_code` is the command's: 1 when a message stayed failed
    or was kept for an operator (`held`)."""

    queues: list[str]
    workers: int = 1
    delivered: int = 0
    requeued: int = 0
    failed: int = 0
    held: int = 0
    dropped: dict[str, int] = dataclasses.field(
        default_factory=lambda: dict.fromkeys(DROP_REASONS, 0)
    )
    errors: int = 0
    elapsed: float = 0.0
    stopped_by: str | None = None
    aborted_by: str | None = None
    # Rows a `redeliver` did not reach before it stopped (its deadline, hung handlers).
    unreached: int = 0
    # Messages a backoff held back (left alone, no attempt charged), the soonest
    # due of them, and the queues a breaker stopped for the rest of the pass.
    waiting: int = 0
    next_due: datetime | None = None
    paused: list[str] = dataclasses.field(default_factory=list)

    @property
    def handled(self) -> int:
        """Messages handed to a handler."""
        return (
            self.delivered
            + self.requeued
            + self.failed
            + self.held
            + self.dropped["permanent"]
            + self.dropped["max_attempts"]
        )

    @property
    def exit_code(self) -> int:
        return 1 if self.failed or self.held or self.errors or self.paused else 0

    def pause(self, queue: str) -> None:
        if queue not in self.paused:
            self.paused.append(queue)

    def add_waiting(self, count: int, next_due: datetime | None) -> None:
        self.waiting += count
        if next_due is not None and (self.next_due is None or next_due < self.next_due):
            self.next_due = next_due

    def add(self, outcome: Outcome) -> None:
        if outcome is Outcome.DELIVERED:
            self.delivered += 1
        elif outcome is Outcome.REQUEUED:
            self.requeued += 1
        elif outcome is Outcome.FAILED:
            self.failed += 1
        elif outcome is Outcome.HELD:
            self.held += 1
        else:
            self.dropped[str(outcome)] += 1

    def merge(self, other: Mapping[str, Any]) -> None:
        for name in ("delivered", "requeued", "failed", "held", "errors"):
            setattr(self, name, getattr(self, name) + int(other.get(name, 0)))
        for reason, count in other.get("dropped", {}).items():
            self.dropped[reason] = self.dropped.get(reason, 0) + int(count)
        self.stopped_by = self.stopped_by or other.get("stopped_by")
        self.aborted_by = self.aborted_by or other.get("aborted_by")
        for name in other.get("paused", ()):
            self.pause(name)

    def as_dict(self) -> dict[str, Any]:
        return {
            "queues": list(self.queues),
            "workers": self.workers,
            "delivered": self.delivered,
            "requeued": self.requeued,
            "dropped": dict(self.dropped),
            "failed": self.failed,
            "held": self.held,
            "errors": self.errors,
            "elapsed": round(self.elapsed, 3),
            "rate": round(self.handled / self.elapsed, 1) if self.elapsed > 0 else None,
            "waiting": self.waiting,
            "next_due": self.next_due.isoformat() if self.next_due is not None else None,
            "paused": list(self.paused),
            "stopped_by": self.stopped_by,
            "aborted_by": self.aborted_by,
        }
