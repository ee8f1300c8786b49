"""Stop signals for a drain: the first stops it after the message in hand (for at
most a grace period), the second aborts at once, a third exits on the spot."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

from deadletter.drain.errors import DrainAborted

__all__ = ["DEFAULT_GRACE", "EXIT_AFTER_ABORT", "SignalGuard"]

logger = logging.getLogger("deadletter")

DEFAULT_GRACE = 10.0
# After an abort the grace ran into, how long before the process exits on the spot.
EXIT_AFTER_ABORT = 5.0


class SignalGuard:
    """SIGINT/SIGTERM for a drain: the first calls `stop` with the signal's name (the
    drain stops after the message in hand), the second raises `DrainAborted` at once
    (the row in hand stays queued), a third exits on the spot in case a handler
    swallowed the second. Installs itself only in the main thread, where Python
    delivers signals.

    With `grace` (seconds), a message in hand that is not settled that long
    after the first signal is treated as if the second had come: the drain
    aborts, and if it still runs `EXIT_AFTER_ABORT` seconds later (a handler
    that swallowed the abort, or is stuck in C code), it exits as on the third.
    The guard signals its own main thread for that, so a blocking system call
    there is interrupted as by a signal from outside.
    """

    def __init__(
        self,
        stop: Callable[[str], None],
        signums: Sequence[int] = (signal.SIGINT, signal.SIGTERM),
        *,
        grace: float | None = None,
    ) -> None:
        self.stop = stop
        self.signums = tuple(signums)
        self.grace = grace
        self.received = 0
        self._previous: dict[int, Any] = {}
        self._timers: list[threading.Timer] = []
        self._grace_ran_out = False

    def __enter__(self) -> SignalGuard:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in self.signums}
        return self

    def __exit__(self, *exc: object) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers = []
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received += 1
        name = signal.Signals(signum).name
        if self.received == 1:
            logger.warning(
                "drain stopping after the message in hand signal=%s grace=%s", name, self.grace
            )
            self.stop(name)
            self._start_grace(signum)
            return
        if self.received == 2:
            if self._grace_ran_out:
                logger.warning(
                    "drain aborting: the message in hand did not finish within the grace; "
                    "it stays queued signal=%s grace=%s",
                    name,
                    self.grace,
                )
                raise DrainAborted(signum, grace=self.grace)
            logger.warning("drain aborting; the message in hand stays queued signal=%s", name)
            raise DrainAborted(signum)
        os._exit(128 + signum)

    def _start_grace(self, signum: int) -> None:
        if self.grace is None or not self._previous:
            return
        main = threading.get_ident()  # a signal handler runs in the main thread

        def grace_over() -> None:
            if self.received < 2:
                self._grace_ran_out = True
                signal.pthread_kill(main, signum)

        def exit_now() -> None:
            signal.pthread_kill(main, signum)

        self._timers = [
            threading.Timer(self.grace, grace_over),
            threading.Timer(self.grace + EXIT_AFTER_ABORT, exit_now),
        ]
        for timer in self._timers:
            timer.daemon = True
            timer.start()
