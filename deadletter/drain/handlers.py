"""Handlers: `DEADLETTER_HANDLERS` read, checked and imported before any row is
touched. `handler_problems` and `max_attempts_problem` are the one place of
checks E002-E005's logic: the system check and the drain both call them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.utils.module_loading import import_string

from deadletter.conf import conf
from deadletter.drain.errors import DrainConfigError
from deadletter.wire import keys
from deadletter.wire.messages import Message

__all__ = [
    "Handler",
    "HandlerProblem",
    "handler_problems",
    "load_handlers",
    "max_attempts_problem",
]

Handler = Callable[[Message], Message | None]


@dataclasses.dataclass(frozen=True, slots=True)
class HandlerProblem:
    """One thing wrong with `DEADLETTER_HANDLERS`: `kind` is "setting", "import" or "callable"."""

    queue: str
    path: Any
    kind: str
    detail: str

    def __str__(self) -> str:
        if self.kind == "setting":
            return self.detail
        return f"handler {self.path!r} of queue {self.queue!r} {self.detail}"


def handler_problems(handlers: Any) -> list[HandlerProblem]:
    """Everything that keeps `handlers` (the setting's value) from being used;
    imports each handler, which is why the system check and the drain share it."""
    if not isinstance(handlers, Mapping):
        return [
            HandlerProblem(
                "",
                handlers,
                "setting",
                "DEADLETTER_HANDLERS must be a dict of queue name to dotted path, "
                f"got {type(handlers).__name__}",
            )
        ]
    problems: list[HandlerProblem] = []
    for name, path in handlers.items():
        try:
            keys.encode_queue_name(name)
        except ValueError as exc:
            problems.append(
                HandlerProblem(str(name), path, "setting", f"DEADLETTER_HANDLERS: {exc}")
            )
            continue
        if not isinstance(path, str) or not path:
            problems.append(
                HandlerProblem(
                    name,
                    path,
                    "setting",
                    f"DEADLETTER_HANDLERS[{name!r}] must be a dotted path string, got {path!r}",
                )
            )
            continue
        try:
            handler = import_string(path)
        except Exception as exc:  # a handler module may fail to import in any way
            problems.append(
                HandlerProblem(
                    name, path, "import", f"does not import: {type(exc).__name__}: {exc}"
                )
            )
            continue
        if not callable(handler):
            problems.append(
                HandlerProblem(
                    name, path, "callable", f"is a {type(handler).__name__}, not callable"
                )
            )
    return problems


def load_handlers(queues: Sequence[str] | None = None) -> dict[str, tuple[str, Handler]]:
    """Queue -> (dotted path, handler) for `queues` (every configured queue by
    default), or `DrainConfigError` naming every problem, before any row is read."""
    configured = conf.HANDLERS
    problems = handler_problems(configured)
    if problems:
        raise DrainConfigError("; ".join(str(p) for p in problems))
    wanted = list(dict.fromkeys(queues)) if queues else list(configured)
    missing = [name for name in wanted if name not in configured]
    if missing:
        raise DrainConfigError(
            f"no handler configured for queue(s) {', '.join(map(repr, missing))}; "
            "add them to DEADLETTER_HANDLERS"
        )
    return {name: (configured[name], import_string(configured[name])) for name in wanted}


def max_attempts_problem(value: Any) -> str | None:
    """What is wrong with `DEADLETTER_MAX_ATTEMPTS` (E005), or None; the drain
    refuses to start on the same text."""
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        return f"DEADLETTER_MAX_ATTEMPTS must be None or an int of at least 1, got {value!r}"
    return None
