"""The drain's errors: a bad configuration, a queue another drain holds, an abort."""

from __future__ import annotations

import signal

from django.core.exceptions import ImproperlyConfigured

from deadletter.drain.report import DrainReport
from deadletter.exceptions import DeadletterError

__all__ = ["DrainAborted", "DrainConfigError", "DrainLocked"]


class DrainConfigError(ImproperlyConfigured, DeadletterError):
    """The drain cannot start as configured (handlers, options); no row was touched."""


class DrainLocked(DeadletterError):
    """Another drain holds a queue of this SQLite database."""


class DrainAborted(BaseException):  # like KeyboardInterrupt: not an error to catch
    """A second stop signal, or the first one's grace running out (`grace` then
    holds its seconds): stop at once, leaving the message in hand queued.

    A BaseException, so a handler's `except Exception` does not swallow it.
    """

    def __init__(self, signum: int, *, grace: float | None = None) -> None:
        super().__init__(signum)
        self.signum = signum
        self.grace = grace
        self.report: DrainReport | None = None

    @property
    def signame(self) -> str:
        return signal.Signals(self.signum).name
