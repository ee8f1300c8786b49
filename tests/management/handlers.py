"""Handlers the command tests name in a child's settings."""

from __future__ import annotations

import sys
import threading
import time

from deadletter.wire.messages import Message


def leaking_handler(msg: Message) -> None:
    """Delivers, leaving behind a non-daemon thread that sleeps ten minutes."""
    threading.Thread(target=time.sleep, args=(600,), name="handler-leak", daemon=False).start()
    print("leaked", file=sys.stderr, flush=True)
