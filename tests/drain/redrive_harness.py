"""Handlers a redrive's tests name in DEADLETTER_HANDLERS, what they saw, and the
command in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from deadletter.wire.messages import Message
from tests.factories import REPO, manage_py

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


class RedriveCommand:
    """`manage.py deadletter_redrive` in a child process, as an operator runs it, with
    `handler` (a dotted path; drain_harness's `recording_handler` by default, which
    records each delivery durably in `record`) on queues "q" and "picky"."""

    def __init__(
        self,
        env: dict[str, str],
        tmp: Path,
        handler: str = "tests.drain.drain_harness.recording_handler",
        **extra: str,
    ) -> None:
        self.record = tmp / "record.txt"
        self.in_hand = tmp / "in-hand"
        settings_module = "redrive_settings_" + handler.replace(".", "_")
        settings_file = tmp / f"{settings_module}.py"
        if not settings_file.exists():
            settings_file.write_text(
                "from project.settings import *  # noqa: F403\n"
                f"DEADLETTER_HANDLERS = {{'q': {handler!r}, "
                "'picky': 'tests.drain.redrive_harness.picky_handler'}\n"
            )
        self.env = {
            **env,
            "PYTHONPATH": f"{REPO}:{tmp}",
            "DJANGO_SETTINGS_MODULE": settings_module,
            "DRAIN_RECORD": str(self.record),
            "DRAIN_IN_HAND": str(self.in_hand),
            **extra,
        }

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """The command to its end; its output captured."""
        return manage_py("deadletter_redrive", *args, env=self.env, timeout=timeout)

    def start(self, *args: str) -> subprocess.Popen[str]:
        """The command in the background, its output captured."""
        return subprocess.Popen(
            [sys.executable, "manage.py", "deadletter_redrive", *args],
            cwd=REPO,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def in_hand_lines(self) -> list[str]:
        return self.in_hand.read_text().splitlines() if self.in_hand.exists() else []


def json_lines(text: str) -> list[dict[str, Any]]:
    """The JSON objects a `--format json` run printed, one a line."""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]
