"""A queue's settings, read once: its entry in `DEADLETTER_HANDLERS` (a dotted path,
or a dict of the handler and its limits) resolved against the global defaults.

The one reader of `DEADLETTER_HANDLERS`: the drain, the queue's rules, the reports,
the checks and the edges all ask `queue_config`. Entries are parsed once and kept
until Django's `setting_changed` names a setting they read. The checks refuse a
value of the wrong shape (`problems` says what is wrong); until a project fixes
it, a key of the wrong shape reads as its default.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from django.core.signals import setting_changed

from deadletter.conf import BUILTIN_HANDLERS, conf

__all__ = [
    "QueueConfig",
    "configured_queues",
    "handlers_setting",
    "queue_config",
]


@dataclasses.dataclass(frozen=True, slots=True)
class QueueConfig:
    """One queue's settings, each resolved against its default.

    `handler` is the dotted path as written (not a str when the setting is wrong);
    `own_policy` says the entry is a dict; `alerts` is the queue's own alert rules,
    which override `DEADLETTER_ALERTS` key by key.
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
    builtin: bool = False


_cache: dict[tuple[str, bool], QueueConfig | None] = {}
_READS = frozenset(
    "DEADLETTER_" + name
    for name in ("HANDLERS", "MAX_ATTEMPTS", "BACKOFF", "BREAKER", "ARCHIVE_FOR", "MAX_QUEUE_AGE")
)


def _forget(*, setting: str, **kwargs: Any) -> None:
    if setting in _READS:
        _cache.clear()


setting_changed.connect(_forget, dispatch_uid="deadletter.queue.config")


def handlers_setting() -> Mapping[str, Any]:
    """`DEADLETTER_HANDLERS` as written, or {} when it is no dict (the checks say so)."""
    handlers = conf.HANDLERS
    return handlers if isinstance(handlers, Mapping) else {}


def configured_queues() -> tuple[str, ...]:
    """The queues `DEADLETTER_HANDLERS` names, in its order (built-in queues not)."""
    return tuple(str(name) for name in handlers_setting())


def queue_config(name: str, *, builtin: bool = False) -> QueueConfig | None:
    """Queue `name`'s settings; None when `DEADLETTER_HANDLERS` does not name it
    (with `builtin`, the app's own queues count as named: `BUILTIN_HANDLERS`)."""
    key = (name, builtin)
    try:
        return _cache[key]
    except KeyError:
        found = _cache[key] = _parse(name, builtin)
        return found


def _parse(name: str, builtin: bool) -> QueueConfig | None:
    handlers = handlers_setting()
    if name in handlers:
        value, is_builtin = handlers[name], False
    elif builtin and name in BUILTIN_HANDLERS:
        value, is_builtin = BUILTIN_HANDLERS[name], True
    else:
        return None
    spec: Mapping[str, Any] = value if isinstance(value, Mapping) else {"handler": value}
    alerts = spec.get("alerts")
    return QueueConfig(
        name=name,
        handler=spec.get("handler"),
        max_attempts=spec.get("max_attempts", conf.MAX_ATTEMPTS),
        backoff=_backoff(spec.get("backoff", conf.BACKOFF)),
        breaker=spec.get("breaker", conf.BREAKER),
        archive_for=spec.get("archive_for", conf.ARCHIVE_FOR),
        max_age=spec.get("max_age", conf.MAX_QUEUE_AGE),
        editable=spec.get("editable", False) is True,
        alerts=alerts if isinstance(alerts, Mapping) else {},
        own_policy=isinstance(value, Mapping),
        builtin=is_builtin,
    )


def _backoff(value: Any) -> tuple[float, float] | None:
    try:
        return None if value is None else (float(value[0]), float(value[1]))
    except (TypeError, ValueError, IndexError, KeyError):
        return None
