"""Handlers: `DEADLETTER_HANDLERS` read, checked and imported before any row is
touched, each with its queue's policy (`policy`). `handler_problems` is the one
place of checks E002-E005 and E013-E015's logic: the system check and the drain
both call it. `BUILTIN_HANDLERS` are the app's own queues, drained without the
project naming them; a project's entry for one of them wins.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, NamedTuple

from django.utils.module_loading import import_string

from deadletter.conf import conf
from deadletter.drain.errors import DrainConfigError
from deadletter.drain.policy import Policy, policy_of
from deadletter.queue import alert_parking
from deadletter.queue.config import (
    backoff_problem,
    breaker_problem,
    config_of,
    handler_path,
    handlers_setting,
    max_attempts_problem,
    policy_problems,
    queue_config,
)
from deadletter.wire import keys
from deadletter.wire.messages import Message

__all__ = [
    "BUILTIN_HANDLERS",
    "Handler",
    "HandlerProblem",
    "Loaded",
    "configured_handlers",
    "handler_problems",
    "load_handlers",
    "takes_context",
    "max_attempts_problem",
]

Handler = Callable[..., Message | None]

BUILTIN_HANDLERS: Mapping[str, str] = {
    alert_parking.QUEUE: f"{alert_parking.handle.__module__}.{alert_parking.handle.__name__}",
}
"""The app's own queues and their handlers' dotted paths: alerts a channel could not
take are retried like any message. A project's own entry for such a queue wins."""
"""`handle(msg)` or `handle(msg, ctx)` (a `DeliveryContext`): `takes_context` says which."""


class Loaded(NamedTuple):
    """A queue's handler as the drain uses it: its path, the callable, its policy,
    and whether it takes the delivery context as a second argument."""

    path: str
    handler: Handler
    policy: Policy
    takes_context: bool = False


def takes_context(handler: Callable[..., object]) -> bool | str:
    """Whether `handler` is called `handler(msg, ctx)` (two or more positional
    parameters) or `handler(msg)` (one, or only `*args`); a text saying why it can
    be called neither way. A callable whose signature cannot be read is called
    with the message alone, as before the context existed."""
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):
        return False
    positional = required = 0
    star = False
    for parameter in signature.parameters.values():
        if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            positional += 1
            required += parameter.default is parameter.empty
        elif parameter.kind is parameter.VAR_POSITIONAL:
            star = True
        elif parameter.kind is parameter.KEYWORD_ONLY and parameter.default is parameter.empty:
            return f"has a required keyword-only parameter {parameter.name!r}"
    if required > 2:
        return (
            f"takes {required} required positional parameters; a handler takes "
            "handle(msg) or handle(msg, ctx)"
        )
    if positional == 0 and not star:
        return "takes no positional parameter; a handler takes handle(msg) or handle(msg, ctx)"
    return positional >= 2


@dataclasses.dataclass(frozen=True, slots=True)
class HandlerProblem:
    """One thing wrong with `DEADLETTER_HANDLERS` (or the policy defaults): `kind` is
    "setting", "import", "callable", "signature", or the policy key at fault ("keys",
    "max_attempts", "backoff", "breaker")."""

    queue: str
    path: Any
    kind: str
    detail: str

    def __str__(self) -> str:
        if self.kind not in ("import", "callable", "signature"):
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
    problems = _default_problems()
    for name, value in handlers.items():
        path = handler_path(value)
        try:
            keys.encode_queue_name(name)
        except ValueError as exc:
            problems.append(
                HandlerProblem(str(name), path, "setting", f"DEADLETTER_HANDLERS: {exc}")
            )
            continue
        policy = policy_problems(name, value)
        problems += [HandlerProblem(name, path, p.key, p.detail) for p in policy]
        if isinstance(value, Mapping) and "handler" not in value:
            continue
        if not isinstance(path, str) or not path:
            problems.append(
                HandlerProblem(
                    name,
                    path,
                    "setting",
                    f"DEADLETTER_HANDLERS[{name!r}] must be a dotted path string (or a dict "
                    f"with one under 'handler'), got {path!r}",
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
        elif isinstance(form := takes_context(handler), str):
            problems.append(HandlerProblem(name, path, "signature", form))
    return problems


def _default_problems() -> list[HandlerProblem]:
    """The policy defaults: `DEADLETTER_MAX_ATTEMPTS`, `_BACKOFF`, `_BREAKER`."""
    found = [
        ("max_attempts", max_attempts_problem(conf.MAX_ATTEMPTS)),
        ("backoff", backoff_problem(conf.BACKOFF, "DEADLETTER_BACKOFF")),
        ("breaker", breaker_problem(conf.BREAKER, "DEADLETTER_BREAKER")),
    ]
    return [HandlerProblem("", None, kind, text) for kind, text in found if text is not None]


def configured_handlers(named: Collection[str] = ()) -> Any:
    """`DEADLETTER_HANDLERS` with the built-in queues it does not name after its own
    (as it is when it is no dict: `handler_problems` says what is wrong). A project
    that names no queue and sends no alert (`DEADLETTER_ALERTS` empty) gets only the
    built-in ones in `named`: a site without handlers of its own runs no drain
    unless asked for one of them, and one that alerts retries what it could not send."""
    handlers = handlers_setting()
    if not isinstance(handlers, Mapping):
        return handlers
    wanted = bool(handlers) or bool(conf.ALERTS)
    builtin = {
        name: path
        for name, path in BUILTIN_HANDLERS.items()
        if name not in handlers and (wanted or name in named)
    }
    return {**handlers, **builtin}


def load_handlers(queues: Sequence[str] | None = None) -> dict[str, Loaded]:
    """Queue -> `Loaded` (dotted path, handler, policy) for `queues` (every
    configured queue, the built-in ones too, by default), or `DrainConfigError`
    naming every problem, before any row is read."""
    configured = configured_handlers(queues or ())
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
    loaded = {}
    for name in wanted:
        policy = policy_of(queue_config(name) or config_of(name, configured[name]))
        handler = import_string(policy.path)
        loaded[name] = Loaded(policy.path, handler, policy, takes_context(handler) is True)
    return loaded
