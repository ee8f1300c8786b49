"""The threads of `DrainOptions.concurrency`: a source's lanes, each a thread that
runs the jobs handed to it inside a context of its own (on a server the claim
transactions of its own connection) and closes its database connections when it
ends. What a job does (claim, call the handler, settle) is the delivery loop's
(`delivery.Delivery`); this module only runs jobs side by side.

Threads are started as the jobs in hand need them, up to the count, so a queue
with three messages opens at most three connections.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from django.db import connections

__all__ = ["MAX_CONCURRENCY", "Lanes"]

logger = logging.getLogger("deadletter")

MAX_CONCURRENCY = 256
"""The most handlers one drain process runs at once (each a thread, on a server
each with a connection of its own)."""

T = TypeVar("T")


class Lanes(Generic[T]):
    """Up to `count` threads running submitted jobs, each job given its thread's
    context (what `context()` entered in that thread). A job catches what it
    raises and reports through its own channel; one that does not is logged.

    Leaving the block without an exception waits for every thread (each is idle
    then: the caller has collected every job it submitted); leaving it by an
    exception (an abort) does not wait: the threads end after their job."""

    def __init__(
        self,
        count: int,
        context: Callable[[], contextlib.AbstractContextManager[T]],
        *,
        name: str = "deadletter-lane",
    ) -> None:
        self._count = count
        self._context = context
        self._name = name
        self._jobs: queue.SimpleQueue[Callable[[T], None] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> Lanes[T]:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        for _ in self._threads:
            self._jobs.put(None)
        if exc_type is None:
            for thread in self._threads:
                thread.join()

    def submit(self, job: Callable[[T], None], *, busy: int) -> None:
        """Run `job` in a free thread; `busy` is how many jobs are in hand with this
        one (a thread is started when there are fewer threads, up to the count)."""
        while len(self._threads) < min(busy, self._count):
            thread = threading.Thread(
                target=self._run, name=f"{self._name}-{len(self._threads)}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        self._jobs.put(job)

    def _run(self) -> None:
        try:
            with self._context() as context:
                while (job := self._jobs.get()) is not None:
                    job(context)
        except Exception:
            logger.exception("drain lane failed thread=%s", threading.current_thread().name)
        finally:
            connections.close_all()  # this thread's own connections
