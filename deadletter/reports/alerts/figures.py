"""What the alert rules look at in each queue, read as bounded index seeks, never a
whole count: the depth up to one past the rule's threshold (a LIMIT), the oldest
message's age from the first key of its range (keys carry their write time), the
messages about to expire up to `EXPIRING_CAP` from the head, and the queue's last
drain pass (`QueuePass`: its breaker, when it finished).

`stalled` goes by each queue's own last pass (`QueuePass.finished_at`, written by
every drain pass over the queue, empty or not): a queue the drain never passed
over has no last pass and never reads as stalled, since no service was seen to
run for it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime, timedelta

from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter.queue import limits, waiting
from deadletter.reports.alerts.rules import Rules
from deadletter.reports.stats import expiring_rows
from deadletter.store import scans, sql
from deadletter.wire import gotime, keys

__all__ = ["EXPIRING_CAP", "QueueFigures", "heads", "read_figures"]

EXPIRING_CAP = 100
"""The most expiring messages an evaluation reads in a queue ("100+" beyond)."""


@dataclasses.dataclass(frozen=True, slots=True)
class QueueFigures:
    """One queue's figures as the rules read them; None where no rule asked."""

    queue: str
    depth: int | None = None  # at most the depth rule's threshold + 1
    oldest_at: datetime | None = None
    expiring: int | None = None  # at most EXPIRING_CAP + 1
    paused: bool | None = None
    last_pass: datetime | None = None

    def oldest_age(self, now: datetime) -> timedelta | None:
        return None if self.oldest_at is None else now - self.oldest_at


def heads(connection: BaseDatabaseWrapper) -> dict[str, bytes]:
    """Every queue that holds a row and its lowest key: one statement, one seek a queue."""
    return {keys.queue_of(head): head for head in scans.queue_heads(connection)}


def read_figures(
    connection: BaseDatabaseWrapper,
    rules: dict[str, Rules],
    head_keys: dict[str, bytes],
    now: datetime,
) -> dict[str, QueueFigures]:
    """The figures of every queue in `rules` whose rules need one."""
    wanted = [q for q, r in rules.items() if r.needs_figures]
    passes = waiting.last_passes([q for q in wanted if rules[q].breaker or rules[q].stalled])
    found = {}
    for queue in wanted:
        rule = rules[queue]
        head = head_keys.get(queue)
        last = passes.get(queue)
        found[queue] = QueueFigures(
            queue=queue,
            depth=_capped_depth(connection, queue, rule.depth) if rule.depth else None,
            oldest_at=_oldest_at(connection, queue, head) if rule.oldest_age else None,
            expiring=_expiring(connection, queue, head, rule.expiring, now)
            if rule.expiring
            else None,
            paused=None if last is None else bool(last.paused),
            last_pass=None if last is None else last.finished_at,
        )
    return found


def _capped_depth(connection: BaseDatabaseWrapper, queue: str, threshold: int) -> int:
    """The queue's rows, counted up to `threshold + 1`: enough to say "deeper than"."""
    low, high = keys.queue_bounds(queue)
    query = sql.statement(
        connection,
        "SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE {key} >= %s AND {key} < %s "
        "LIMIT %s) capped",
    )
    return int(sql.read(connection, query, (low, high, threshold + 1))[0][0])


def _oldest_at(connection: BaseDatabaseWrapper, queue: str, head: bytes | None) -> datetime | None:
    """When the queue's oldest message was written: its head key's time, or, past a
    legacy row (whose key tells no time), its first per-message key's."""
    if head is None:
        return None
    if not keys.is_legacy_key(head):
        return keys.written_at(head)
    low, high = keys.message_bounds(queue)
    query = sql.statement(
        connection,
        "SELECT {key} FROM {table} WHERE {key} >= %s AND {key} < %s ORDER BY {key} LIMIT 1",
    )
    rows = sql.read(connection, query, (low, high))
    return keys.written_at(bytes(rows[0][0])) if rows else None


def _expiring(
    connection: BaseDatabaseWrapper,
    queue: str,
    head: bytes | None,
    horizon: timedelta,
    now: datetime,
) -> int:
    """Messages the queue's age limit drops within `horizon`, up to `EXPIRING_CAP + 1`,
    read from the head only when the head itself is that old (`reports.expiry`'s rule)."""
    if head is None:
        return 0
    threshold = (
        gotime.epoch_ns(now)
        - gotime.duration_ns(limits.max_age(queue))
        + gotime.duration_ns(horizon)
    )
    if not keys.is_legacy_key(head):
        try:
            if keys.parse_key(head).time_ns >= threshold:
                return 0
        except ValueError:
            pass
    rows = expiring_rows(connection, queue, threshold, limit=EXPIRING_CAP + 1)
    return sum(1 for _key, msg in rows if msg is not None)


def queues_of(rules: Sequence[str], head_keys: dict[str, bytes]) -> list[str]:
    """The queues an evaluation looks at: those holding a row and those configured."""
    return sorted({*rules, *head_keys})
