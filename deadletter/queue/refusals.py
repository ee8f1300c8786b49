"""The one error an operator action's rules raise: which input is at fault and why.

Each action (an edit, a mute, a redrive) decides its rules once, below the
edges; the admin, the API and the commands map a `Refused` to their own form (a
form error on `field`, a 400 naming it, a `CommandError`) and never re-decide.
"""

from __future__ import annotations

from deadletter.exceptions import DeadletterError

__all__ = ["Refused"]


class Refused(DeadletterError, ValueError):
    """An action its rules do not allow; nothing was written. `field` names the
    input at fault (None: the action as a whole), `message` says why."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
