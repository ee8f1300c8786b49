"""Stop signals for a drain: the first stops it after the message in hand, the
second aborts at once, a third exits on the spot."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any, Protocol

from deadletter.drain.errors import DrainAborted

__all__ = ["SignalGuard"]

logger = logging.getLogger("deadletter")


class Stoppable(Protocol):
    def stop(self, reason: str = ...) -> None: ...


class SignalGuard:
    """SIGINT/SIGTERM for a drain: the first stops it after the message in hand,
    the second raises `DrainAborted` at once (the row in hand stays queued), a
    third exits on the spot in case a handler swallowed the second. Installs
    itself only in the main thread, where Python delivers signals."""

    def __init__(
        self, drainer: Stoppable, signums: Sequence[int] = (signal.SIGINT, signal.SIGTERM)
    ) -> None:
        self.drainer = drainer
        self.signums = tuple(signums)
        self.received = 0
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> SignalGuard:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in self.signums}
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received += 1
        name = signal.Signals(signum).name
        if self.received == 1:
            logger.warning("drain stopping after the message in hand signal=%s", name)
            self.drainer.stop(name)
            return
        if self.received == 2:
            logger.warning("drain aborting; the message in hand stays queued signal=%s", name)
            raise DrainAborted(signum)
        os._exit(128 + signum)
