"""Handlers under a time limit: a handler that must not hold up its caller runs in
a daemon thread the drain can walk away from, so a handler that hangs costs a
thread, never the web request, the claim transaction or the drain's stop.

The limit is `DEADLETTER_HANDLER_TIMEOUT`, cut to what is left of a web
request's budget (`TimeLimit`). With no limit in force the handler runs inline,
in the drain's own thread and transaction.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import math
import os
import threading
import time
from typing import Any

from django.db import connections

from deadletter.conf import conf
from deadletter.drain.context import DeliveryContext
from deadletter.drain.errors import DrainConfigError
from deadletter.drain.handlers import Handler
from deadletter.exceptions import DeadletterError
from deadletter.wire.messages import Message

__all__ = [
    "MAX_HUNG_HANDLERS",
    "HandlerTimeout",
    "HungHandlers",
    "TimeLimit",
    "call_within",
    "configured_handler_timeout",
    "hung_handlers",
]

logger = logging.getLogger("deadletter")

# Handler threads given up on and still running that one process may hold.
MAX_HUNG_HANDLERS = 8


def seconds_of(value: Any) -> float | None:
    """`value` as seconds when it is a finite int or float (not a bool), else None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def handler_timeout_problem(value: Any) -> str | None:
    """What is wrong with `DEADLETTER_HANDLER_TIMEOUT` (E010), or None; the drain
    refuses to start on the same text."""
    seconds = seconds_of(value)
    if value is not None and (seconds is None or seconds <= 0):
        return (
            f"DEADLETTER_HANDLER_TIMEOUT must be None or a number of seconds above 0, got {value!r}"
        )
    return None


class HandlerTimeout(Exception):
    """A handler did not return within its time limit: a failed attempt like any other."""


class HungHandlers(DeadletterError):
    """This process holds `MAX_HUNG_HANDLERS` handler threads that never returned;
    no handler is started until one of them ends (the drain stops, the message
    in hand untouched)."""


def configured_handler_timeout() -> float | None:
    """`DEADLETTER_HANDLER_TIMEOUT` in seconds, or `DrainConfigError` with check E010's text."""
    value = conf.HANDLER_TIMEOUT
    problem = handler_timeout_problem(value)
    if problem is not None:
        raise DrainConfigError(problem)
    return None if value is None else float(value)


@dataclasses.dataclass(frozen=True, slots=True)
class TimeLimit:
    """How long the next handler may run: `timeout`, and no later than `deadline`
    (a `time.monotonic()` instant: a web request's budget)."""

    timeout: float | None = None
    deadline: float | None = None

    @classmethod
    def within(cls, budget: float | None = None, *, deadline: float | None = None) -> TimeLimit:
        """The configured handler timeout, for a run of `budget` seconds from now
        (or ending at `deadline`); neither: the command's rule, the timeout alone."""
        if budget is not None:
            deadline = time.monotonic() + budget
        return cls(configured_handler_timeout(), deadline)

    def spent(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def seconds(self) -> float | None:
        """Seconds for the handler about to start (at most 0: start none); None: no
        limit, it runs inline."""
        if self.deadline is None:
            return self.timeout
        left = self.deadline - time.monotonic()
        return left if self.timeout is None else min(self.timeout, left)


class _Hung:
    """The handler threads of this process that were given up on and still run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0
        self._pid = os.getpid()

    def count(self) -> int:
        with self._lock:
            self._forget_after_fork()
            return self._count

    def check(self) -> None:
        with self._lock:
            self._forget_after_fork()
            if self._count >= MAX_HUNG_HANDLERS:
                logger.error(
                    "handler not started: too many hung handlers in this process hung=%s pid=%s",
                    self._count,
                    self._pid,
                )
                raise HungHandlers(
                    f"{self._count} handler(s) that did not return in time still run in this "
                    f"process (pid {self._pid}); no other is started until one ends or the "
                    "process restarts"
                )

    def abandon(self, call: _Call) -> bool:
        """Give up on `call`; False when it finished just now."""
        with self._lock:
            if call.finished:
                return False
            call.abandoned = True
            self._count += 1
            return True

    def finish(self, call: _Call) -> None:
        with self._lock:
            call.finished = True
            if call.abandoned and self._pid == os.getpid():
                self._count -= 1

    def _forget_after_fork(self) -> None:
        if self._pid != os.getpid():  # a forked child has none of its parent's threads
            self._pid, self._count = os.getpid(), 0


_hung = _Hung()


def hung_handlers() -> int:
    """Handler threads of this process given up on that have not returned yet."""
    return _hung.count()


@dataclasses.dataclass(eq=False)
class _Call:
    handler: Handler
    msg: Message
    key: bytes
    context: DeliveryContext | None = None
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None
    finished: bool = False
    abandoned: bool = False
    started: float = dataclasses.field(default_factory=time.monotonic)

    def run(self) -> None:
        try:
            if self.context is None:
                self.result = self.handler(self.msg)
            else:
                self.result = self.handler(self.msg, self.context)
        except BaseException as exc:  # handed to the waiting drain, or logged
            self.error = exc
        finally:
            connections.close_all()  # this thread's own connections, not the drain's
            _hung.finish(self)
            self.done.set()
        if self.abandoned:
            logger.warning(
                "handler returned after the drain gave up on it; its result is ignored "
                "key=%s elapsed=%.1f error=%s",
                self.key.hex(),
                time.monotonic() - self.started,
                None if self.error is None else type(self.error).__name__,
            )


def call_within(
    handler: Handler,
    msg: Message,
    seconds: float,
    *,
    key: bytes,
    context: DeliveryContext | None = None,
) -> Message | None:
    """`handler(msg)` (`handler(msg, context)` with a `context`) in a daemon thread
    that runs in a copy of the caller's context variables (the attempt's span
    among them); `HandlerTimeout` when it has not returned after `seconds` (the
    thread is left to finish on its own, its result ignored), `HungHandlers`
    before starting when too many such threads still run. The thread closes its
    own database connections when it ends."""
    _hung.check()
    call = _Call(handler, msg, bytes(key), context)
    thread = threading.Thread(
        target=contextvars.copy_context().run,
        args=(call.run,),
        name=f"deadletter-handler-{key.hex()[:16]}",
    )
    thread.daemon = True
    thread.start()
    try:
        returned = call.done.wait(seconds)
    except BaseException:  # an abort (DrainAborted) while waiting: the thread is given up on
        _hung.abandon(call)
        raise
    if not returned and _hung.abandon(call):
        raise HandlerTimeout(f"handler did not return within {_seconds_text(seconds)} s")
    call.done.wait()
    if call.error is not None:
        raise call.error
    result: Message | None = call.result
    return result


def _seconds_text(seconds: float) -> str:
    if not math.isfinite(seconds):
        return str(seconds)
    return f"{round(seconds, 1):g}"
