"""A queue's settings, read once: its entry in `DEADLETTER_HANDLERS` (a dotted path,
or a dict of the handler and its limits) resolved against the global defaults.

The one reader of `DEADLETTER_HANDLERS`: the drain, the queue's rules, the reports,
the checks and the edges all ask `queue_config`. Entries are parsed once and kept
until Django's `setting_changed` names a `DEADLETTER_*` setting. `policy_problems`
is the one reading of a policy's rules, which the system checks (E004, E005,
E013-E015, E020-E022, E024, E025) and the drain both report; a value they refuse
reads as the default of its key, `problems` saying why.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from django.core.signals import setting_changed

from deadletter.conf import ALERT_KEYS, conf
from deadletter.queue.alert_channels import channels_problems

__all__ = [
    "ARCHIVE_OFF",
    "MAX_AGE_LIMIT",
    "POLICY_KEYS",
    "PolicyProblem",
    "QueueConfig",
    "alerts_problems",
    "archive_for_problem",
    "backoff_problem",
    "breaker_problem",
    "config_of",
    "configured_queues",
    "editable_problem",
    "handler_path",
    "handlers_setting",
    "max_age_problem",
    "max_attempts_problem",
    "policy_problems",
    "queue_config",
    "queue_configs",
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
ARCHIVE_OFF = timedelta(0)
"""An `archive_for` of zero keeps nothing: what leaves a queue is gone, as before the archive."""

MAX_AGE_LIMIT = timedelta(microseconds=(2**63 - 1) // 1000)
"""The longest age limit: the age rule counts in 64-bit nanoseconds, as Go's time.Duration."""


@dataclasses.dataclass(frozen=True, slots=True)
class PolicyProblem:
    """One thing wrong with a queue's policy: `key` is the policy key at fault
    (one of `POLICY_KEYS`, or "keys" for the dict itself)."""

    queue: str
    key: str
    detail: str

    def __str__(self) -> str:
        return self.detail


@dataclasses.dataclass(frozen=True, slots=True)
class QueueConfig:
    """One queue's settings, each resolved against its default.

    `handler` is the dotted path as written (not a str when the setting is wrong);
    `own_policy` says the entry is a dict; `alerts` is the queue's own alert rules,
    which override `DEADLETTER_ALERTS` key by key (as written when a dict: the
    sender says what is wrong with a channel); `problems` is what the checks refuse
    in the entry (any other key at fault reads as its default).
    """

    name: str
    handler: Any
    max_attempts: int | None = None
    backoff: tuple[float, float] | None = None
    breaker: int | None = None
    archive_for: timedelta | None = None
    max_age: timedelta = timedelta(days=30)
    editable: bool = False
    alerts: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    own_policy: bool = False
    problems: tuple[PolicyProblem, ...] = ()


_cache: dict[str, QueueConfig] = {}


def _forget(*, setting: str, **kwargs: Any) -> None:
    if setting.startswith("DEADLETTER_"):
        _cache.clear()


setting_changed.connect(_forget, dispatch_uid="deadletter.queue.config")


def handler_path(value: Any) -> Any:
    """The handler's dotted path in a `DEADLETTER_HANDLERS` value (either form)."""
    return value.get("handler") if isinstance(value, Mapping) else value


def handlers_setting() -> Any:
    """`DEADLETTER_HANDLERS` as the project wrote it, for the checks, which say
    what is wrong with a value of the wrong shape."""
    return conf.HANDLERS


def configured_queues() -> tuple[str, ...]:
    """The queues `DEADLETTER_HANDLERS` names, in its order (built-in queues not;
    none when the setting is no dict)."""
    handlers = conf.HANDLERS
    return tuple(str(name) for name in handlers) if isinstance(handlers, Mapping) else ()


def queue_configs() -> tuple[QueueConfig, ...]:
    """The settings of every queue `DEADLETTER_HANDLERS` names, in its order."""
    return tuple(c for c in map(queue_config, configured_queues()) if c is not None)


def queue_config(name: str) -> QueueConfig | None:
    """Queue `name`'s settings; None when `DEADLETTER_HANDLERS` does not name it."""
    found = _cache.get(name)
    if found is None:
        handlers = conf.HANDLERS
        if not isinstance(handlers, Mapping) or name not in handlers:
            return None  # not kept: clients may make any number of queues
        found = _cache[name] = config_of(name, handlers[name])
    return found


def config_of(name: str, value: Any) -> QueueConfig:
    """The settings a `DEADLETTER_HANDLERS` entry `value` gives queue `name` (the
    drain's built-in queues have such an entry of their own)."""
    own_policy = isinstance(value, Mapping)
    problems = tuple(policy_problems(name, value))
    wrong = {p.key for p in problems} - {"alerts"}
    entry: Mapping[str, Any] = value if own_policy else {"handler": value}
    spec = {key: v for key, v in entry.items() if key not in wrong}
    backoff = spec["backoff"] if "backoff" in spec else _default_backoff()
    return QueueConfig(
        name=name,
        handler=entry.get("handler"),
        max_attempts=spec.get("max_attempts", conf.MAX_ATTEMPTS),
        backoff=None if backoff is None else (float(backoff[0]), float(backoff[1])),
        breaker=spec.get("breaker", conf.BREAKER),
        archive_for=spec.get("archive_for", conf.ARCHIVE_FOR),
        max_age=spec.get("max_age", conf.MAX_QUEUE_AGE),
        editable=spec.get("editable", False) is True,
        alerts=alerts if isinstance(alerts := spec.get("alerts"), Mapping) else {},
        own_policy=own_policy,
        problems=problems,
    )


def _default_backoff() -> Any:
    value = conf.BACKOFF
    return None if backoff_problem(value, "DEADLETTER_BACKOFF") else value


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
                ("archive_for", archive_for_problem),
                ("max_age", max_age_problem),
                ("editable", editable_problem),
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


def _seconds(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def archive_for_problem(value: Any, where: str) -> str | None:
    """What is wrong with an archive retention (a timedelta of at least 0, or None), or None."""
    if value is None or (isinstance(value, timedelta) and value >= ARCHIVE_OFF):
        return None
    return (
        f"{where} must be None (keep for ever) or a timedelta of at least 0 "
        f"(timedelta(0) turns the archive off), got {value!r}"
    )


def max_age_problem(value: Any, where: str) -> str | None:
    """What is wrong with an age limit (a positive timedelta within `MAX_AGE_LIMIT`), or None."""
    if isinstance(value, timedelta) and ARCHIVE_OFF < value <= MAX_AGE_LIMIT:
        return None
    return (
        f"{where} must be a positive timedelta of at most {MAX_AGE_LIMIT.days:,} days "
        f"(2**63 - 1 nanoseconds: the age rule counts in 64-bit nanoseconds), got {value!r}"
    )


def editable_problem(value: Any, where: str) -> str | None:
    """What is wrong with an `editable` flag (True or False), or None."""
    if isinstance(value, bool):
        return None
    return f"{where} must be True or False, got {value!r}"
