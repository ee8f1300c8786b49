"""A redrive as an operator asks for one, in one place for every edge: its inputs
(`INPUTS`, `plan_redrive`'s keywords) and their rules (`plan_redrive`: each broken
one a `RedriveError` naming its field), the queue access it needs (`ACTION` on
each queue of `guarded`), what it matches (`Filter`), its cancel
(`cancel_redrive`), who sees which (`visible`) and the `LogEntry` each leaves
(`audit`). The admin form, the serializer and the command only convert their
input into these keywords and present the error (a form error on the field, a 400
on it, a `CommandError`). Running one is `redrive_run`; carrying on unfinished
ones, `redrive_turns`.

The plan is bounded by `until`, the queue's newest key when it was counted: what
is parked after the plan is not in it, and `matched` is what the run walks.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from django.apps import apps
from django.db import transaction
from django.db.models import QuerySet

from deadletter.conf import conf
from deadletter.drain.concurrency import MAX_CONCURRENCY
from deadletter.drain.errors import DrainConfigError
from deadletter.drain.handlers import load_handlers
from deadletter.models import QueuedMessage, Redrive
from deadletter.queue import claims, search
from deadletter.queue.access import Scope
from deadletter.queue.config import queue_config
from deadletter.queue.refusals import Refused
from deadletter.wire import keys

__all__ = [
    "ACTION",
    "CANCELLABLE",
    "FINAL",
    "INPUTS",
    "MAX_STOP_AFTER",
    "PERMISSION",
    "AuditAction",
    "Filter",
    "RedriveError",
    "audit",
    "cancel_redrive",
    "describe",
    "filter_text",
    "guarded",
    "handled",
    "inputs",
    "plan_redrive",
    "redrive_filter",
    "visible",
]

INPUTS = (
    "queue",
    "search",
    "after",
    "before",
    "destination",
    "rate",
    "ramp",
    "stop_after",
    "ignore_backoff",
    "concurrency",
)
"""What a redrive is asked to do: `plan_redrive`'s keywords, each edge's fields."""
PERMISSION = "deadletter.redrive_queuedmessage"
"""The permission planning and cancelling a redrive need."""
ACTION = "redrive"
"""The queue access action a planner needs on each queue of `guarded`, and a
canceller on the redrive's queue."""
MAX_STOP_AFTER = 100
FINAL = (Redrive.Status.FINISHED, Redrive.Status.CANCELLED)
"""Statuses a redrive never leaves."""
STARTED_BY_CHARS = 150
CANCELLABLE = (
    Redrive.Status.PLANNED,
    Redrive.Status.RUNNING,
    Redrive.Status.STOPPED,
    Redrive.Status.FAILED,
)
"""Statuses a redrive can be cancelled from: every one it may still carry on from."""
AuditAction = Literal["planned", "cancelled"]
AUDIT_FLAGS: dict[AuditAction, int] = {"planned": 1, "cancelled": 2}
"""django.contrib.admin.models' ADDITION and CHANGE (that module cannot be imported
where the admin is not installed)."""


class RedriveError(Refused):
    """A redrive that cannot be planned, run or cancelled as asked: `message` says
    why, for an operator; `field` is the input it is about (one of `INPUTS`), None
    when it is no one input's (the site's handlers, a combination, the row's state)."""


def inputs(values: Mapping[str, Any]) -> dict[str, Any]:
    """The redrive's inputs among an edge's converted values, as `plan_redrive`'s
    keywords (those absent take its defaults)."""
    return {name: values[name] for name in INPUTS if name in values}


def guarded(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The inputs naming a queue the planner needs `ACTION` on, with the queue: the
    queue itself and a move's destination."""
    return [(field, values[field]) for field in ("queue", "destination") if values.get(field)]


def plan_redrive(
    *,
    queue: str,
    search: str = "",
    after: datetime | None = None,
    before: datetime | None = None,
    destination: str | None = None,
    rate: float | None = None,
    ramp: Sequence[int] = (),
    stop_after: float | None = None,
    ignore_backoff: bool = False,
    concurrency: int = 1,
    started_by: str = "",
    save: bool = True,
    reveal: bool = True,
    by: Any = None,
    note: str = "Planned",
) -> Redrive:
    """Check a redrive and count what it matches now: a `Redrive` with status
    planned, stored unless `save` is False (a dry run stores nothing), with the
    user `by`'s `LogEntry` (`audit`: `note` and what it plans) in the same
    transaction. `RedriveError` names the first problem, before anything is
    written. Without `reveal` (a planner who may not see what `DEADLETTER_REDACT`
    masks) its search never matches a masked value, in the count or the run."""
    _check_queue(queue, "queue")
    destination = destination or None
    if destination is not None:
        _check_queue(destination, "destination")
    ramp = _checked_ramp(ramp)
    if rate is not None and not (
        isinstance(rate, int | float) and math.isfinite(rate) and rate > 0
    ):
        raise RedriveError(f"rate must be above 0 messages a second, got {rate!r}", "rate")
    if stop_after is not None and not (
        isinstance(stop_after, int | float) and 0 < stop_after <= MAX_STOP_AFTER
    ):
        raise RedriveError(
            f"stop-after must be a percentage above 0 and at most {MAX_STOP_AFTER}, "
            f"got {stop_after!r}",
            "stop_after",
        )
    if type(concurrency) is not int or not 1 <= concurrency <= MAX_CONCURRENCY:
        raise RedriveError(
            f"concurrency must be a whole number between 1 and {MAX_CONCURRENCY}, "
            f"got {concurrency!r}",
            "concurrency",
        )
    for bound, name in ((after, "after"), (before, "before")):
        if bound is not None and bound.tzinfo is None:
            raise RedriveError(f"{name} must be an aware datetime, got {bound.isoformat()}", name)
    if after is not None and before is not None and after >= before:
        raise RedriveError(
            f"after ({after.isoformat()}) must be earlier than before ({before.isoformat()})",
            "before",
        )
    if len(started_by) > STARTED_BY_CHARS:
        raise RedriveError(f"started_by is longer than {STARTED_BY_CHARS} characters")
    chosen = redrive_filter(queue, search, after, before, reveal=reveal)
    # Each value is well formed; now what it names, against the site and its rows.
    if destination is not None:
        if destination == queue:
            raise RedriveError(f"the destination is the queue itself ({queue!r})", "destination")
        if not _is_known(destination):
            raise RedriveError(
                f"no queue {destination!r} to move into: it holds no message and has no "
                "handler in DEADLETTER_HANDLERS (a typo would park the messages where "
                "nothing drains them)",
                "destination",
            )
        for given, option in (
            (ramp, "ramp"),
            (stop_after is not None, "stop-after"),
            (ignore_backoff, "ignore-backoff"),
        ):
            if given:
                raise RedriveError(f"{option} judges handler calls; a move calls no handler")
    else:
        try:
            load_handlers([queue])
        except DrainConfigError as exc:
            raise RedriveError(str(exc)) from exc
    if not _is_known(queue):
        raise RedriveError(f"no queue {queue!r}: it holds no message and has no handler", "queue")
    until = claims.tail_key(queue)
    matched = chosen.count(until=until)
    redrive = Redrive(
        queue=queue,
        search=search,
        after=after,
        before=before,
        destination=destination,
        rate=None if rate is None else float(rate),
        ramp=list(ramp),
        stop_after=None if stop_after is None else float(stop_after),
        ignore_backoff=ignore_backoff,
        concurrency=concurrency,
        reveal=reveal,
        started_by=started_by,
        until=until,
        matched=matched,
        remaining=matched,
        status=Redrive.Status.PLANNED,
        created_at=datetime.now(UTC),
    )
    if save:
        with transaction.atomic(using=conf.DATABASE):
            redrive.save(using=conf.DATABASE)
            audit(by, redrive, "planned", f"{note}: {describe(redrive)}")
    return redrive


def describe(redrive: Redrive) -> str:
    """What a redrive plans, in a line: how many messages of which queue, its filter,
    where to."""
    target = f" into queue {redrive.destination}" if redrive.destination else ""
    return f"{redrive.matched} message(s) of {redrive.queue} ({filter_text(redrive)}){target}"


def filter_text(redrive: Redrive) -> str:
    """A redrive's filter in words: its search and its bounds on the first failure."""
    parts = [redrive.search] if redrive.search else []
    if redrive.after is not None:
        parts.append(f"first failure from {redrive.after.isoformat()}")
    if redrive.before is not None:
        parts.append(f"first failure before {redrive.before.isoformat()}")
    return "; ".join(parts) or "every message"


def redrive_filter(
    queue: str,
    search: str,
    after: datetime | None,
    before: datetime | None,
    *,
    reveal: bool = True,
) -> Filter:
    """The redrive's filter, or `RedriveError` on `search` with the search's message."""
    try:
        return Filter.parse(queue, search, after=after, before=before, reveal=reveal)
    except ValueError as exc:  # the search's SearchError is a ValueError
        raise RedriveError(str(exc), "search") from exc


def cancel_redrive(redrive_id: int, *, by: Any = None, note: str = "Cancelled") -> Redrive:
    """Cancel a redrive that has not ended (planned, running, stopped, failed): its
    runner stops after the message in hand (it looks at least once a second).
    With the user `by`, `note` is its `LogEntry` (`audit`), in the same
    transaction. `RedriveError` for one that has ended."""
    rows = Redrive.objects.using(conf.DATABASE)
    now = datetime.now(UTC)
    with transaction.atomic(using=conf.DATABASE):
        done = rows.filter(
            pk=redrive_id,
            status__in=CANCELLABLE,
        ).update(status=Redrive.Status.CANCELLED, finished_at=now, reason="cancelled")
        redrive = rows.filter(pk=redrive_id).first()
        if redrive is None:
            raise RedriveError(f"no redrive {redrive_id}")
        if not done:
            raise RedriveError(f"{redrive} has ended; there is nothing to cancel")
        audit(by, redrive, "cancelled", note)
    return redrive


def visible(scope: Scope) -> QuerySet[Redrive]:
    """The redrives of the queues `scope` lets its user view (the table holds one
    row a redrive, so its distinct queues are few)."""
    found = Redrive.objects.using(conf.DATABASE).all()
    if scope.unrestricted:
        return found
    names = found.order_by("queue").values_list("queue", flat=True).distinct()
    return found.filter(queue__in=scope.names_filter(names))


def handled(redrive: Redrive) -> int:
    """The messages a redrive is through with (handed over or moved), whatever
    became of them."""
    return redrive.delivered + redrive.failed + redrive.dropped + redrive.moved


def _check_queue(name: str, what: str) -> None:
    if not isinstance(name, str):
        raise RedriveError(f"the {what} must be a queue name, got {name!r}", what)
    try:
        keys.encode_queue_name(name)
    except ValueError as exc:
        raise RedriveError(f"the {what}: {exc}", what) from exc


def _is_known(name: str) -> bool:
    """A queue with a handler or a row (a legacy one too)."""
    if queue_config(name) is not None:
        return True
    return _rows().of_queue(name).exists()


def _checked_ramp(ramp: Sequence[int]) -> list[int]:
    if isinstance(ramp, str | bytes):
        raise RedriveError(f"ramp must be a list of step sizes, got {ramp!r}", "ramp")
    steps = list(ramp)
    for step in steps:
        if type(step) is not int or step < 1:
            raise RedriveError(f"ramp steps must be whole numbers above 0, got {step!r}", "ramp")
    return steps


def audit(user: Any, redrive: Redrive, action: AuditAction, message: str) -> None:
    """A `LogEntry` naming `user` in the redrive's admin History, for a redrive
    planned or cancelled. None where there is no user (the shell's operator, no
    auth app) or no admin (its log is the admin's model)."""
    if user is None or not apps.is_installed("django.contrib.admin"):
        return
    log_entry: Any = apps.get_model("admin", "LogEntry")
    log_entry.objects.log_actions(
        user_id=user.pk,
        queryset=[redrive],
        action_flag=AUDIT_FLAGS[action],
        change_message=message,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Filter:
    """What a redrive walks: the keys of queue `queue` that `query`, the parsed search,
    matches (None: every message of the queue), oldest first, up to the key the plan
    stopped at.

    Without a query it is the queue's per-message key range, read from the primary
    key's index, exact whether or not the search's index has caught up with the
    newest rows; with one it is the search's (`queue.search`), the one query
    language of the admin, the API and the commands."""

    queue: str
    query: search.Query | None = None
    reveal: bool = True

    @classmethod
    def parse(
        cls,
        queue: str,
        text: str = "",
        *,
        after: datetime | None = None,
        before: datetime | None = None,
        reveal: bool = True,
    ) -> Filter:
        """The filter of `text`, `after` and `before` (bounds on the first failure);
        without `reveal` the search never matches a value `DEADLETTER_REDACT` masks.
        The search's `SearchError` for a malformed query."""
        if not text.strip() and after is None and before is None:
            return cls(queue)
        return cls(queue, search.parse(text, after=after, before=before), reveal)

    def keys(self, *, after: bytes | None, until: bytes, limit: int) -> list[bytes]:
        """Up to `limit` matching keys above `after` and at most `until`, ascending."""
        if self.query is not None:
            return [
                bytes(k)
                for k in search.matching_keys(
                    self.query,
                    queue=self.queue,
                    after_key=after,
                    until_key=until,
                    limit=limit,
                    reveal=self.reveal,
                )
            ]
        low, high = keys.message_bounds(self.queue)
        rows = _rows().filter(key__gte=low, key__lt=high, key__lte=until)
        if after is not None:
            rows = rows.filter(key__gt=after)
        return [
            bytes(k) for k in rows.order_by("key").values_list("key", flat=True)[:limit].iterator()
        ]

    def count(self, *, until: bytes | None) -> int:
        """How many messages of the queue it matches up to `until` (0 when None)."""
        if until is None:
            return 0
        if self.query is not None:
            return int(
                search.count_matching(
                    self.query, queue=self.queue, until_key=until, reveal=self.reveal
                )
            )
        low, high = keys.message_bounds(self.queue)
        return _rows().filter(key__gte=low, key__lt=high, key__lte=until).count()


def _rows() -> Any:
    return QueuedMessage.objects.using(conf.DATABASE)
