"""Every queue's figures for operators, from one function: `collect`.

The command (`deadletter_stats`) and the Prometheus endpoint (`metrics`) show
what this returns; it is built on `summaries`, as the REST API's queue list
is, and reads heads and horizons as the admin's overview does, so they agree.
What each figure costs:

* depth and the head: `summaries.QueueStatus` (key-range counts on the
  primary-key index, the oldest key by one index seek, only the head row decoded);
* expiring within a horizon: rows are read from the head in key order while
  their key (enqueue) time is before `now - max age + horizon`, at most
  `EXPIRING_SCAN_LIMIT` of them, and a message counts when its `QueuedAt` is
  before that too. A message's `QueuedAt` is never after its key time except
  when fetch stamps an unstamped one, so rows past that point are younger and
  not read; a message parked again under a newer key (a partly delivered
  remainder keeps its first-failure time) is counted once its new key is that
  old. The work is the number of rows about to expire, which a drain reads anyway;
* attempts histogram: the oldest `ATTEMPTS_SAMPLE` rows of each queue (the
  ones retried longest), or every row when `attempts_sample` is None, a full
  scan at the decode rate (about 300,000 rows a second);
* drops: the persistent counters of `models.DropCount`;
* archived: the archive's entries of each queue, one grouped count on the
  archive's (queue, archived_at, id) index for all the queues listed.

A queue's age figures go by its own age limit (`limits.max_age`).
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter.conf import conf
from deadletter.models import DROP_TABLE, ArchivedMessage
from deadletter.queue import limits
from deadletter.queue.archive_retention import archived_counts, archived_queues
from deadletter.queue.config import configured_queues
from deadletter.queue.rows import attempts_of
from deadletter.queue.waiting import last_passes, waiting
from deadletter.reports import queues as queue_pages
from deadletter.reports import summaries
from deadletter.store import scans, sql
from deadletter.store.counters import DROP_REASONS, drop_counts
from deadletter.wire import codec, gotime, keys
from deadletter.wire.messages import Message

__all__ = [
    "ATTEMPT_BUCKETS",
    "QueueStats",
    "Stats",
    "collect",
    "expiring_rows",
    "listed_queues",
]

EXPIRING_SCAN_LIMIT = 100_000
ATTEMPTS_SAMPLE = 10_000
# Upper bounds of the attempts histogram's buckets; the last bucket is open.
ATTEMPT_BUCKETS = (0, 1, 2, 3, 5, 10)
_PAGE = 1000


def bucket_labels() -> list[str]:
    """`0`, `1`, `2`, `3`, `4-5`, `6-10`, `11+`: one label per bucket, in order."""
    labels, low = [], 0
    for high in ATTEMPT_BUCKETS:
        labels.append(str(high) if high == low else f"{low}-{high}")
        low = high + 1
    return [*labels, f"{low}+"]


@dataclasses.dataclass(frozen=True, slots=True)
class QueueStats:
    """One queue's figures (or the totals, named ""). Ages are seconds at `Stats.now`;
    `attempts` counts messages per bucket of `bucket_labels()`."""

    name: str
    depth: int
    oldest_enqueued_at: datetime | None
    oldest_enqueued_age: float | None
    oldest_queued_at: Any  # the head's first failure: an aware datetime with `.format()`
    oldest_failure_age: float | None
    expiring: int
    expiring_complete: bool
    attempts: dict[str, int]
    attempts_rows: int
    dropped: dict[str, int]
    waiting: int = 0  # messages a backoff holds back now
    paused: bool = False  # the last drain pass stopped the queue by its breaker
    archived: int = 0  # entries in the archive (`queue.archive`)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON: times as RFC 3339 text (to the nanosecond for message times)."""
        queued = self.oldest_queued_at
        return {
            "queue": self.name,
            "depth": self.depth,
            "oldest_enqueued_at": _iso(self.oldest_enqueued_at),
            "oldest_enqueued_age_seconds": self.oldest_enqueued_age,
            "oldest_queued_at": queued.format() if queued is not None else None,
            "oldest_failure_age_seconds": self.oldest_failure_age,
            "expiring": self.expiring,
            "expiring_complete": self.expiring_complete,
            "attempts": dict(self.attempts),
            "attempts_rows": self.attempts_rows,
            "dropped": dict(self.dropped),
            "waiting": self.waiting,
            "paused": self.paused,
            "archived": self.archived,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class Stats:
    """Per-queue figures in key order, their totals, and what they were measured against.

    `others` sums the queues a `limit` left out (None when none was): their depth,
    waiting messages and drops, exact; their ages, expiring counts and attempts
    are not read (`expiring_complete` False)."""

    queues: list[QueueStats]
    totals: QueueStats
    now: datetime
    horizon: timedelta
    max_age: timedelta
    others: QueueStats | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "now": _iso(self.now),
            "horizon_seconds": self.horizon.total_seconds(),
            "max_age_seconds": self.max_age.total_seconds(),
            "queues": [q.as_dict() for q in self.queues],
            "others": self.others.as_dict() if self.others is not None else None,
            "totals": self.totals.as_dict(),
        }


def collect(
    queues: Iterable[str] | None = None,
    *,
    horizon: timedelta | None = None,
    attempts_sample: int | None = ATTEMPTS_SAMPLE,
    now_ns: int | None = None,
    limit: int | None = None,
) -> Stats:
    """The figures of `queues` (every queue that holds a row or has dropped one when
    None). With `limit` and no `queues`, only the queues `listed_queues` picks are
    read one by one and the rest are summed into `Stats.others` by aggregate
    statements, so the cost does not grow with the number of queues. `horizon`
    defaults to `DEADLETTER_EXPIRY_WARNING`, else one day; `attempts_sample` None
    reads every row for the histogram. `ValueError` for an invalid queue name;
    `DatabaseError` when the database cannot be read."""
    now = time.time_ns() if now_ns is None else now_ns
    horizon = summaries.horizon_or_default(horizon)
    max_age = conf.MAX_QUEUE_AGE
    connection = sql.connection()
    if queues is None and limit is not None:
        return _collect_listed(connection, limit, horizon, attempts_sample, now, max_age)
    if queues is None:
        statuses = summaries.queue_statuses()
        dropped = drop_counts(connection)
        archived = archived_counts()
        named = {s.name for s in statuses}
        statuses += [
            summaries.QueueStatus(n, 0, None, None)
            for n in sorted(set(dropped) | set(archived))
            if n not in named
        ]
        statuses.sort(key=lambda s: keys.encode_queue_name(s.name))
    else:
        names = list(dict.fromkeys(queues))
        statuses = [summaries.queue_status(n) for n in names]
        dropped = drop_counts(connection, names)
        archived = archived_counts(names)
    passes = last_passes([s.name for s in statuses])
    result = [
        _queue_stats(
            connection,
            s,
            dropped.get(s.name),
            now,
            now - gotime.duration_ns(limits.max_age(s.name)) + gotime.duration_ns(horizon),
            attempts_sample,
            paused=s.name in passes and passes[s.name].paused,
            archived=archived.get(s.name, 0),
        )
        for s in statuses
    ]
    return Stats(result, _totals(result), gotime.utc_datetime(now), horizon, max_age)


def listed_queues(limit: int) -> tuple[list[str], bool]:
    """The queues a capped report lists, in key order: every queue of
    `DEADLETTER_HANDLERS` that holds a row, has dropped one or has archive entries
    (the project names them, not its clients) and the first `limit` other such
    queues; and whether any queue was left out. About `limit` index seeks (on the
    queue table and the archive's queue index) plus one per handler."""
    connection = sql.connection()
    named = configured_queues()
    configured = [n for n in named if _valid(n)]
    held = [name for name in configured if queue_pages.holds_a_row(name)]
    dropped = drop_counts(connection, configured) if configured else {}
    kept = [n for n, count in archived_counts(configured).items() if count]
    listed = set(held) | set(dropped) | set(kept)
    page = queue_pages.page_after(None, limit + len(configured))
    others = [n for n in page.names if n not in named]
    dropping = [n for n in drop_queues(connection, limit + len(configured)) if n not in named]
    keeping = [
        n for n in itertools.islice(archived_queues(), limit + len(configured)) if n not in named
    ]
    merged = sorted(set(others) | set(dropping) | set(keeping), key=keys.encode_queue_name)
    left_out = len(merged) > limit or page.more_after
    return sorted(listed | set(merged[:limit]), key=keys.encode_queue_name), left_out


def drop_queues(connection: BaseDatabaseWrapper, limit: int) -> list[str]:
    """The first `limit` queues (by name) the drop counters hold, from their index."""
    query = sql.statement(
        connection,
        "SELECT DISTINCT queue FROM {table} ORDER BY queue LIMIT {n}",
        table=DROP_TABLE,
        n=int(limit),
    )
    return [q for (q,) in sql.read(connection, query, ())]


def _valid(name: str) -> bool:
    try:
        keys.encode_queue_name(name)
    except ValueError:
        return False
    return True


def _collect_listed(
    connection: BaseDatabaseWrapper,
    limit: int,
    horizon: timedelta,
    attempts_sample: int | None,
    now: int,
    max_age: timedelta,
) -> Stats:
    """`collect` with a limit: the listed queues one by one, the rest by aggregates."""
    with scans.snapshot(connection):
        names, left_out = listed_queues(limit)
        listed = collect(names, horizon=horizon, attempts_sample=attempts_sample, now_ns=now)
        everything = queue_pages.totals(gotime.utc_datetime(now))
    if not left_out:
        return listed
    result = listed.queues
    dropped = {
        reason: max(0, n - sum(q.dropped.get(reason, 0) for q in result))
        for reason, n in everything.dropped.items()
    }
    others = QueueStats(
        name="",
        depth=max(0, everything.rows - sum(q.depth for q in result)),
        oldest_enqueued_at=None,
        oldest_enqueued_age=None,
        oldest_queued_at=None,
        oldest_failure_age=None,
        expiring=0,
        expiring_complete=False,
        attempts=dict.fromkeys(bucket_labels(), 0),
        attempts_rows=0,
        dropped=dropped,
        waiting=max(0, everything.waiting - sum(q.waiting for q in result)),
        archived=max(
            0,
            ArchivedMessage.objects.using(conf.DATABASE).count() - sum(q.archived for q in result),
        ),
    )
    return dataclasses.replace(listed, totals=_totals([*result, others]), others=others)


def expiring_rows(
    connection: BaseDatabaseWrapper,
    queue: str,
    threshold_ns: int,
    limit: int | None = None,
) -> Iterator[tuple[bytes, Message | None]]:
    """Messages of `queue` whose `QueuedAt` is before `threshold_ns`, read from the
    head while the key time is before it too (the rule in the module docstring).
    At most `limit` rows are read (`EXPIRING_SCAN_LIMIT` by default); if more were
    left, a last `(key, None)` says so. Rows that do not decode are skipped."""
    limit = EXPIRING_SCAN_LIMIT if limit is None else limit
    low, _ = keys.message_bounds(queue)
    high = keys.make_key(queue, max(0, min(threshold_ns, (1 << 64) - 1)), 0)
    for index, (key, value) in enumerate(sql.iter_range(connection, sql.table(), low, high, _PAGE)):
        if index >= limit:
            yield key, None
            return
        for msg in _decode(value):
            if msg.queued_at is not None and gotime.epoch_ns(msg.queued_at) < threshold_ns:
                yield key, msg


def _queue_stats(
    connection: BaseDatabaseWrapper,
    status: summaries.QueueStatus,
    dropped: dict[str, int] | None,
    now: int,
    threshold: int,
    attempts_sample: int | None,
    *,
    paused: bool,
    archived: int = 0,
) -> QueueStats:
    expiring, complete = 0, True
    if status.depth:
        for _key, msg in expiring_rows(connection, status.name, threshold):
            if msg is None:
                complete = False
            else:
                expiring += 1
    attempts, attempts_rows = _attempts(connection, status, attempts_sample)
    enqueued = status.oldest_enqueued_ns
    queued = status.oldest_queued_at
    return QueueStats(
        name=status.name,
        depth=status.depth,
        oldest_enqueued_at=gotime.utc_datetime(enqueued) if enqueued is not None else None,
        oldest_enqueued_age=(now - enqueued) / 1e9 if enqueued is not None else None,
        oldest_queued_at=queued,
        oldest_failure_age=(now - gotime.epoch_ns(queued)) / 1e9 if queued is not None else None,
        expiring=expiring,
        expiring_complete=complete,
        attempts=attempts,
        attempts_rows=attempts_rows,
        dropped=dict(dropped) if dropped else dict.fromkeys(DROP_REASONS, 0),
        waiting=waiting(status.name, gotime.utc_datetime(now)).count if status.depth else 0,
        paused=paused,
        archived=archived,
    )


def _attempts(
    connection: BaseDatabaseWrapper, status: summaries.QueueStatus, sample: int | None
) -> tuple[dict[str, int], int]:
    labels = bucket_labels()
    counts = dict.fromkeys(labels, 0)
    if not status.depth or sample == 0:
        return counts, 0
    low, high = keys.message_bounds(status.name)
    rows = 0
    for _key, value in sql.iter_range(connection, sql.table(), low, high, _PAGE):
        if sample is not None and rows >= sample:
            break
        rows += 1
        for msg in _decode(value):
            counts[labels[_bucket(msg)]] += 1
    return counts, rows


def _bucket(msg: Message) -> int:
    attempts = attempts_of(msg.extra) or 0
    for index, high in enumerate(ATTEMPT_BUCKETS):
        if attempts <= high:
            return index
    return len(ATTEMPT_BUCKETS)


def _totals(queues: list[QueueStats]) -> QueueStats:
    def oldest(values: Iterable[Any]) -> Any:
        present = [v for v in values if v is not None]
        return min(present) if present else None

    def largest(values: Iterable[float | None]) -> float | None:
        present = [v for v in values if v is not None]
        return max(present) if present else None

    attempts = dict.fromkeys(bucket_labels(), 0)
    dropped = dict.fromkeys(DROP_REASONS, 0)
    for q in queues:
        for label, n in q.attempts.items():
            attempts[label] += n
        for reason, n in q.dropped.items():
            dropped[reason] = dropped.get(reason, 0) + n
    return QueueStats(
        name="",
        depth=sum(q.depth for q in queues),
        oldest_enqueued_at=oldest(q.oldest_enqueued_at for q in queues),
        oldest_enqueued_age=largest(q.oldest_enqueued_age for q in queues),
        oldest_queued_at=min(
            (q.oldest_queued_at for q in queues if q.oldest_queued_at is not None),
            key=gotime.epoch_ns,
            default=None,
        ),
        oldest_failure_age=largest(q.oldest_failure_age for q in queues),
        expiring=sum(q.expiring for q in queues),
        expiring_complete=all(q.expiring_complete for q in queues),
        attempts=attempts,
        attempts_rows=sum(q.attempts_rows for q in queues),
        dropped=dropped,
        waiting=sum(q.waiting for q in queues),
        paused=any(q.paused for q in queues),
        archived=sum(q.archived for q in queues),
    )


def _decode(value: bytes) -> list[Message]:
    try:
        return codec.decode(value)
    except codec.CodecError:
        return []


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment is not None else None
