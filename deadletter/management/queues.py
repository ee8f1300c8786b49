"""The queue names a command is asked about: which of them exist, and which parked
queues no handler takes, each answered with a bounded number of statements however
many queue names clients have made."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable

from django.core.management.base import CommandError

from deadletter.conf import conf
from deadletter.models import QueuedMessage
from deadletter.reports import queues
from deadletter.reports.overview import COUNT_CAP, Count

__all__ = ["SHOWN", "Unhandled", "require_known_queues", "unhandled_queues"]

# Parked queues without a handler named in one line; more are counted as "and more".
SHOWN = 10


def require_known_queues(names: Iterable[str] | None) -> None:
    """A `CommandError` (exit 2, as the drain's for the same name) naming the first
    of `names` that is no queue at all (`reports.queues.is_known_queue`)."""
    for name in names or ():
        if not queues.is_known_queue(name):
            raise CommandError(queues.unknown_queue_message(name), returncode=2)


@dataclasses.dataclass(frozen=True, slots=True)
class Unhandled:
    """Parked queues no handler takes, in key order: up to `SHOWN` with their row
    counts (capped at `COUNT_CAP`), and whether there are more."""

    counts: list[tuple[str, int]]
    more: bool

    def __bool__(self) -> bool:
        return bool(self.counts)

    def __str__(self) -> str:
        shown = ", ".join(
            f"{name} ({Count(min(count, COUNT_CAP), count > COUNT_CAP)} row(s))"
            for name, count in self.counts
        )
        return shown + (" and more" if self.more else "")

    def line(self) -> str:
        """The one line a drain prints about them."""
        return f"parked queue(s) with no handler in DEADLETTER_HANDLERS (left untouched): {self}"


def unhandled_queues(handled: Collection[str], shown: int = SHOWN) -> Unhandled:
    """The first `shown` queues holding a row that are not in `handled`: one page of
    `len(handled) + shown + 1` queue names (a seek each), and a capped count each."""
    page = queues.page_after(None, len(handled) + shown + 1)
    names = [name for name in page.names if name not in handled]
    rows = QueuedMessage.objects.using(conf.DATABASE)
    counts = [
        (name, rows.of_queue(name).values_list("key")[: COUNT_CAP + 1].count())
        for name in names[:shown]
    ]
    return Unhandled(counts, len(names) > shown)
