"""A handler for redrive kill tests: `recording_handler` (drain_harness), failing for
good a message whose subject starts with "perm", and `message_dequeued` and
`message_dropped` receivers that SIGKILL the process at the $REDRIVE_KILL_AT-th
message it settles, right after the settlement committed and before the redrive
wrote its counts: the instant a count used to be lost in."""

from __future__ import annotations

import os
import signal
from typing import Any

from deadletter import signals
from deadletter.exceptions import PermanentFailure
from deadletter.wire.messages import Message
from tests.drain.drain_harness import recording_handler

_settled = 0


def _kill_at(**kwargs: Any) -> None:
    global _settled
    _settled += 1
    if str(_settled) == os.environ.get("REDRIVE_KILL_AT"):
        os.kill(os.getpid(), signal.SIGKILL)


signals.message_dequeued.connect(_kill_at, weak=False, dispatch_uid="redrive-kill-at")
signals.message_dropped.connect(_kill_at, weak=False, dispatch_uid="redrive-kill-at-drop")


def killing_handler(msg: Message) -> Message | None:
    """Delivers as `recording_handler` does, or fails a "perm" message for good (the
    kill comes once the row is settled)."""
    if msg.subject.startswith("perm"):
        raise PermanentFailure("the endpoint refuses it")
    return recording_handler(msg)
