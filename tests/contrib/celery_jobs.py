"""Celery tasks for the capture's tests: each records its runs in the file it is
given, so a test (or a test's worker process) can see what ran, with what."""

from __future__ import annotations

import time
from pathlib import Path

from celery import shared_task


def note(record: str, line: str) -> None:
    with open(record, "a") as out:
        out.write(line + "\n")


@shared_task(bind=True, autoretry_for=(ConnectionError,), max_retries=2, default_retry_delay=0)
def flaky(self, fixed_flag: str, record: str, *, label: str = "") -> str:
    """Fails (and retries twice) until `fixed_flag` exists."""
    original = (getattr(self.request, "headers", None) or {}).get("deadletter_original_task_id")
    original = original or getattr(self.request, "deadletter_original_task_id", None)
    note(record, f"{label} retries={self.request.retries} original={original}")
    if not Path(fixed_flag).exists():
        raise ConnectionError(f"endpoint down for {label}")
    return label


@shared_task
def keeps_numbers(fixed_flag: str, record: str, numbers: list[int], *, big: int = 0) -> None:
    """Notes its integers as it received them; fails until `fixed_flag` exists."""
    note(record, repr((numbers, big)))
    if not Path(fixed_flag).exists():
        raise ConnectionError("endpoint down")


@shared_task
def succeeds(record: str) -> int:
    note(record, "ok")
    return 1


@shared_task(bind=True, max_retries=3)
def retried_then_succeeds(self, record: str) -> str:
    note(record, f"retries={self.request.retries}")
    if self.request.retries < 1:
        raise self.retry(countdown=0)
    return "done"


@shared_task(deadletter=False)
def opted_out() -> None:
    raise ValueError("never parked: the task opted out")


@shared_task
def raises(kind: str) -> None:
    raise {"value": ValueError, "key": KeyError, "type": TypeError}[kind](f"a {kind} error")


@shared_task
def takes_an_object(value: object) -> None:
    raise RuntimeError("fails with an argument CBOR cannot hold")


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True)
def slow_then_fails(self, marker: str, record: str) -> None:
    """The first run sleeps until its worker is killed; the run after fails for good."""
    note(record, "start")
    if not Path(marker).exists():
        Path(marker).touch()
        time.sleep(120)
    raise RuntimeError("failed after the worker's restart")
