"""A command's exit past threads a handler left running: Python waits for every
non-daemon thread before a process ends, so one leaked by a handler would keep a
stopped drain alive past its `--grace`. They get what is left of the grace, then
are named in one line and the process exits with its status anyway."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import TextIO

from deadletter.drain import Drainer

__all__ = ["StopClock", "exit_past_leaked_threads", "leaked_threads"]


class StopClock:
    """Stands for a drainer before a `SignalGuard`: passes each stop on and notes
    when the first came, which starts the grace."""

    def __init__(self, drainer: Drainer) -> None:
        self.drainer = drainer
        self.asked_at: float | None = None

    def stop(self, reason: str = "stop") -> None:
        if self.asked_at is None:
            self.asked_at = time.monotonic()
        self.drainer.stop(reason)


def leaked_threads() -> list[threading.Thread]:
    """Live threads other than the main one that Python would wait for at exit."""
    main = threading.main_thread()
    return [t for t in threading.enumerate() if t is not main and not t.daemon and t.is_alive()]


def exit_past_leaked_threads(
    code: int, *, grace: float, since: float | None = None, stderr: TextIO | None = None
) -> None:
    """Return when no leaked thread is left by `grace` seconds after `since` (a
    stop signal; now when None); otherwise name them on `stderr` and end the
    process at once with `code`, its output flushed."""
    deadline = (time.monotonic() if since is None else since) + grace
    for thread in leaked_threads():
        thread.join(max(0.0, deadline - time.monotonic()))
    left = leaked_threads()
    if not left:
        return
    out = stderr or sys.stderr
    names = ", ".join(repr(t.name) for t in left)
    out.write(
        f"{len(left)} thread(s) left running by a handler outlived the {grace:g} s grace: "
        f"{names}; exiting with status {code} without them\n"
    )
    for stream in (out, sys.stdout, sys.stderr):
        stream.flush()
    logging.shutdown()
    os._exit(code)
