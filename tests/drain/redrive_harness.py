"""Handlers a redrive's tests name in DEADLETTER_HANDLERS, and what they saw."""

from __future__ import annotations

import os
import threading
import time

from deadletter.wire.messages import Message

HANDED: list[str] = []
"""The subjects `recording_handler` and `picky_handler` were handed, in order."""

GATE = threading.Event()
"""What `gated_handler` waits for before it delivers."""


def recording_handler(msg: Message) -> None:
    """Delivers every message, noting its subject in `HANDED`."""
    HANDED.append(msg.subject)


def picky_handler(msg: Message) -> None:
    """Fails the messages whose subject starts with "bad", delivers the rest."""
    HANDED.append(msg.subject)
    if msg.subject.startswith("bad"):
        raise ConnectionError("endpoint still down")


def gated_handler(msg: Message) -> None:
    """Notes the message, then waits for `GATE` (a test's "the handler is busy")."""
    HANDED.append(msg.subject)
    GATE.wait(30)


def slow_handler(msg: Message) -> None:
    """Delivers after $REDRIVE_PAUSE seconds (0.05 by default)."""
    HANDED.append(msg.subject)
    time.sleep(float(os.environ.get("REDRIVE_PAUSE", "0.05")))
