"""The alert rules in force for each queue: `DEADLETTER_ALERTS`, overridden key by
key by the queue's `alerts` dict in `DEADLETTER_HANDLERS` (`channels` too). The
values are read as `manage.py check` passed them (E024, E025); a rule set to None
or False is off.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from deadletter.conf import conf
from deadletter.queue import config as queue_settings

__all__ = ["Rules", "any_rule_on", "configured_queues", "rules_for"]

Channel = str | Mapping[str, str]


@dataclasses.dataclass(frozen=True, slots=True)
class Rules:
    """One queue's rules, resolved: None (or False) is off. `expiring` is the horizon:
    messages that the age limit drops within it."""

    new_cause: bool = False
    reopened_cause: bool = False
    depth: int | None = None
    oldest_age: timedelta | None = None
    expiring: timedelta | None = None
    breaker: bool = False
    stalled: timedelta | None = None
    channels: tuple[Channel, ...] = ()

    @property
    def any_on(self) -> bool:
        return bool(
            self.new_cause
            or self.reopened_cause
            or self.breaker
            or any(
                v is not None for v in (self.depth, self.oldest_age, self.expiring, self.stalled)
            )
        )

    @property
    def needs_figures(self) -> bool:
        """Whether a rule reads the queue's rows or its last pass (not only causes)."""
        return self.breaker or any(
            v is not None for v in (self.depth, self.oldest_age, self.expiring, self.stalled)
        )


def rules_for(queue: str) -> Rules:
    """The rules in force for `queue`: the global ones with its own over them."""
    config = queue_settings.queue_config(queue)
    merged: dict[str, Any] = {**conf.ALERTS, **(config.alerts if config is not None else {})}
    expiring = merged.get("expiring")
    if expiring is True:
        expiring = conf.EXPIRY_WARNING
    channels: Sequence[Channel] = merged.get("channels") or ()
    return Rules(
        new_cause=bool(merged.get("new_cause")),
        reopened_cause=bool(merged.get("reopened_cause")),
        depth=merged.get("depth") or None,
        oldest_age=merged.get("oldest_age") or None,
        expiring=expiring or None,
        breaker=bool(merged.get("breaker")),
        stalled=merged.get("stalled") or None,
        channels=tuple(channels),
    )


def configured_queues() -> list[str]:
    """The queues named in `DEADLETTER_HANDLERS` (a queue with rules of its own, or
    one the drain passes over, though it holds nothing yet)."""
    return sorted(queue_settings.configured_queues())


def any_rule_on(queues: Sequence[str]) -> bool:
    """Whether a rule is on for any of `queues` or globally: with none, an evaluation
    reads nothing."""
    return rules_for("").any_on or any(rules_for(q).any_on for q in queues)
