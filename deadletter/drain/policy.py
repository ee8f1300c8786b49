"""Per-queue policy: what `DEADLETTER_HANDLERS` says about each queue beyond its
handler (a value is a dotted path, or a dict with the handler and its limits),
with `DEADLETTER_MAX_ATTEMPTS`, `DEADLETTER_BACKOFF` and `DEADLETTER_BREAKER` as
the defaults a dict leaves out. `policy_problems` is the one reading of the rules
that the system checks (E004, E005, E013-E015, E020-E022, E024, E025) and the drain
both use (`alerts_problems` reads the alert rules, global and per queue).
The queue's own limits (`archive_for`, `max_age`, `editable`) are read by
`queue.limits`, below the drain, which the queue's rules apply.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from deadletter.conf import ALERT_KEYS, conf
from deadletter.queue import limits
from deadletter.queue.alert_channels import channels_problems

__all__ = [
    "HELD_WAIT",
    "POLICY_KEYS",
    "Policy",
    "PolicyProblem",
    "alerts_problems",
    "backoff_problem",
    "breaker_problem",
    "handler_path",
    "held_wait",
    "policy_of",
    "policy_problems",
]

POLICY_KEYS = (
    "handler",
    "max_attempts",
    "backoff",
    "breaker",
    "archive_for",
    "max_age",
    "editable",
    "alerts",
)
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


@dataclasses.dataclass(frozen=True, slots=True)
class PolicyProblem:
    """One thing wrong with a queue's policy: `key` is the policy key at fault
    (one of `POLICY_KEYS`, or "keys" for the dict itself)."""

    queue: str
    key: str
    detail: str

    def __str__(self) -> str:
        return self.detail


def held_wait(policy: Policy | None, attempts: int) -> float:
    """Seconds before a message kept for an operator is handed over again: its
    queue's backoff wait after `attempts`, else `HELD_WAIT`."""
    wait = policy.wait_seconds(attempts) if policy is not None else None
    return HELD_WAIT if wait is None else wait


def handler_path(value: Any) -> Any:
    """The handler's dotted path in a `DEADLETTER_HANDLERS` value (either form)."""
    return value.get("handler") if isinstance(value, Mapping) else value


def backoff_problem(value: Any, where: str) -> str | None:
    """What is wrong with a backoff (`[first_seconds, max_seconds]` or None), or None."""
    if value is None:
        return None
    if (
        not isinstance(value, list | tuple)
        or len(value) != 2
        or not all(_seconds(v) for v in value)
    ):
        return f"{where} must be None or [first_seconds, max_seconds], got {value!r}"
    first, most = value
    if not 0 < first <= most:
        return f"{where} must have 0 < first_seconds <= max_seconds, got {value!r}"
    return None


def breaker_problem(value: Any, where: str) -> str | None:
    """What is wrong with a breaker (a count of failures in a row, or None), or None."""
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        return f"{where} must be None or an int of at least 1, got {value!r}"
    return None


def max_attempts_problem(value: Any, where: str = "DEADLETTER_MAX_ATTEMPTS") -> str | None:
    """What is wrong with an attempts limit (E005 for the setting), or None."""
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        return f"{where} must be None or an int of at least 1, got {value!r}"
    return None


def policy_problems(name: str, value: Any) -> list[PolicyProblem]:
    """Everything wrong with queue `name`'s value in `DEADLETTER_HANDLERS` apart from
    its handler's import (which `handlers.handler_problems` reports)."""
    if not isinstance(value, Mapping):
        return []
    where = f"DEADLETTER_HANDLERS[{name!r}]"
    problems = [
        PolicyProblem(
            name, "keys", f"{where} has unknown key {key!r}; known: " + ", ".join(POLICY_KEYS)
        )
        for key in value
        if key not in POLICY_KEYS
    ]
    if "handler" not in value:
        problems.append(PolicyProblem(name, "keys", f"{where} needs a 'handler' dotted path"))
    for key, problem in (
        (
            "max_attempts",
            max_attempts_problem(value.get("max_attempts"), f"{where}['max_attempts']"),
        ),
        ("backoff", backoff_problem(value.get("backoff"), f"{where}['backoff']")),
        ("breaker", breaker_problem(value.get("breaker"), f"{where}['breaker']")),
        *(
            (key, check(value[key], f"{where}[{key!r}]"))
            for key, check in (
                ("archive_for", limits.archive_for_problem),
                ("max_age", limits.max_age_problem),
                ("editable", limits.editable_problem),
            )
            if key in value
        ),
    ):
        if problem is not None:
            problems.append(PolicyProblem(name, key, problem))
    if "alerts" in value:
        problems += [
            PolicyProblem(name, "alerts", problem)
            for problem in alerts_problems(value["alerts"], f"{where}['alerts']")
        ]
    return problems


def alerts_problems(value: Any, where: str = "DEADLETTER_ALERTS") -> list[str]:
    """Everything wrong with a dict of alert rules (`DEADLETTER_ALERTS`, E024, or a
    queue's `alerts`, E025): the evaluator reads them as checked here, and the
    channels as `queue.alert_channels` reads them for the sender too."""
    if not isinstance(value, Mapping):
        return [f"{where} must be a dict of alert rules, got {value!r}"]
    problems = [
        f"{where} has unknown key {key!r}; known: " + ", ".join(ALERT_KEYS)
        for key in value
        if key not in ALERT_KEYS
    ]
    for key in ("new_cause", "reopened_cause", "breaker"):
        if key in value and not isinstance(value[key], bool):
            problems.append(f"{where}[{key!r}] must be True or False, got {value[key]!r}")
    depth = value.get("depth")
    if depth is not None and (not isinstance(depth, int) or isinstance(depth, bool) or depth < 1):
        problems.append(f"{where}['depth'] must be None or an int of at least 1, got {depth!r}")
    for key in ("oldest_age", "stalled"):
        problems += _span_problem(value.get(key), f"{where}[{key!r}]")
    expiring = value.get("expiring")
    if expiring is True and conf.EXPIRY_WARNING is None:
        problems.append(
            f"{where}['expiring'] is True, which means DEADLETTER_EXPIRY_WARNING's horizon, "
            "but that is unset: give a timedelta"
        )
    elif not isinstance(expiring, bool):
        problems += _span_problem(expiring, f"{where}['expiring']", "True (the expiry warning), ")
    if "channels" in value:
        problems += channels_problems(value["channels"], f"{where}['channels']")
    return problems


def _span_problem(value: Any, where: str, also: str = "") -> list[str]:
    if value is None or (isinstance(value, timedelta) and value > timedelta(0)):
        return []
    options = f"None, {also}or" if also else "None or"
    return [f"{where} must be {options} a timedelta above 0, got {value!r}"]


def policy_of(name: str, value: Any) -> Policy:
    """Queue `name`'s policy from its `DEADLETTER_HANDLERS` value (checked before)
    and the global defaults."""
    spec: Mapping[str, Any] = value if isinstance(value, Mapping) else {"handler": value}
    backoff = spec.get("backoff", conf.BACKOFF)
    return Policy(
        path=spec["handler"],
        max_attempts=spec.get("max_attempts", conf.MAX_ATTEMPTS),
        backoff=None if backoff is None else (float(backoff[0]), float(backoff[1])),
        breaker=spec.get("breaker", conf.BREAKER),
    )


def _seconds(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )
