"""Redrives, the stored job: planned here (`plan_redrive`: the filter checked, what
it matches counted up to the queue's tail, the row written), cancelled here
(`cancel_redrive`), run by `redrive_run` (resumed by `redrive_turns`); each
planning and cancelling by a user is audited here (`audit`). The admin, the API
and the command call these, so a redrive means the same wherever it is started.

The plan is bounded by `until`, the queue's newest key when it was counted: what
is parked after the plan is not in it, and `matched` is what the run walks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from django.apps import apps

from deadletter.conf import conf
from deadletter.drain.concurrency import MAX_CONCURRENCY
from deadletter.drain.errors import DrainConfigError
from deadletter.drain.handlers import load_handlers
from deadletter.drain.redrive_match import Filter
from deadletter.models import QueuedMessage, Redrive
from deadletter.queue import claims
from deadletter.wire import keys

__all__ = [
    "FINAL",
    "AuditAction",
    "RedriveError",
    "audit",
    "cancel_redrive",
    "plan_redrive",
    "redrive_filter",
]

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


class RedriveError(ValueError):
    """A redrive that cannot be planned, run or cancelled as asked; its text says why,
    for an operator (a form error, a 400, a `CommandError`)."""


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
) -> Redrive:
    """Check a redrive and count what it matches now: a `Redrive` with status
    planned, stored unless `save` is False (a dry run stores nothing).
    `RedriveError` names the first problem, before anything is written. Without
    `reveal` (a planner who may not see what `DEADLETTER_REDACT` masks) its search
    never matches a masked value, in the count or the run."""
    _check_queue(queue, "queue")
    destination = destination or None
    ramp = _checked_ramp(ramp)
    if destination is not None:
        _check_queue(destination, "destination")
        if destination == queue:
            raise RedriveError(f"the destination is the queue itself ({queue!r})")
        if not _is_known(destination):
            raise RedriveError(
                f"no queue {destination!r} to move into: it holds no message and has no "
                "handler in DEADLETTER_HANDLERS (a typo would park the messages where "
                "nothing drains them)"
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
        raise RedriveError(f"no queue {queue!r}: it holds no message and has no handler")
    if rate is not None and not (
        isinstance(rate, int | float) and math.isfinite(rate) and rate > 0
    ):
        raise RedriveError(f"rate must be above 0 messages a second, got {rate!r}")
    if stop_after is not None and not (
        isinstance(stop_after, int | float) and 0 < stop_after <= 100
    ):
        raise RedriveError(
            f"stop-after must be a percentage above 0 and at most 100, got {stop_after!r}"
        )
    if type(concurrency) is not int or not 1 <= concurrency <= MAX_CONCURRENCY:
        raise RedriveError(
            f"concurrency must be a whole number from 1 to {MAX_CONCURRENCY}, got {concurrency!r}"
        )
    for bound, name in ((after, "after"), (before, "before")):
        if bound is not None and bound.tzinfo is None:
            raise RedriveError(f"{name} must be an aware datetime, got {bound.isoformat()}")
    if after is not None and before is not None and after >= before:
        raise RedriveError(
            f"after ({after.isoformat()}) must be earlier than before ({before.isoformat()})"
        )
    if len(started_by) > STARTED_BY_CHARS:
        raise RedriveError(f"started_by is longer than {STARTED_BY_CHARS} characters")
    chosen = redrive_filter(queue, search, after, before, reveal=reveal)
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
        redrive.save(using=conf.DATABASE)
    return redrive


def redrive_filter(
    queue: str,
    search: str,
    after: datetime | None,
    before: datetime | None,
    *,
    reveal: bool = True,
) -> Filter:
    """The redrive's filter, or `RedriveError` with the search's message."""
    try:
        return Filter.parse(queue, search, after=after, before=before, reveal=reveal)
    except ValueError as exc:  # the search's SearchError is a ValueError
        raise RedriveError(str(exc)) from exc


def cancel_redrive(redrive_id: int) -> Redrive:
    """Cancel a redrive that has not ended (planned, running, stopped, failed): its
    runner stops after the message in hand (it looks at least once a second).
    `RedriveError` for one that has ended."""
    rows = Redrive.objects.using(conf.DATABASE)
    now = datetime.now(UTC)
    done = rows.filter(
        pk=redrive_id,
        status__in=CANCELLABLE,
    ).update(status=Redrive.Status.CANCELLED, finished_at=now, reason="cancelled")
    redrive = rows.filter(pk=redrive_id).first()
    if redrive is None:
        raise RedriveError(f"no redrive {redrive_id}")
    if not done:
        raise RedriveError(f"{redrive} has ended; there is nothing to cancel")
    return redrive


def _check_queue(name: str, what: str) -> None:
    if not isinstance(name, str):
        raise RedriveError(f"the {what} must be a queue name, got {name!r}")
    try:
        keys.encode_queue_name(name)
    except ValueError as exc:
        raise RedriveError(f"the {what}: {exc}") from exc


def _is_known(name: str) -> bool:
    """A queue with a handler or a row (a legacy one too)."""
    if name in conf.HANDLERS:
        return True
    return QueuedMessage.objects.using(conf.DATABASE).of_queue(name).exists()


def _checked_ramp(ramp: Sequence[int]) -> list[int]:
    if isinstance(ramp, str | bytes):
        raise RedriveError(f"ramp must be a list of step sizes, got {ramp!r}")
    steps = list(ramp)
    for step in steps:
        if type(step) is not int or step < 1:
            raise RedriveError(f"ramp steps must be whole numbers of at least 1, got {step!r}")
    return steps


def audit(user: Any, redrive: Redrive, action: AuditAction, message: str) -> None:
    """A `LogEntry` naming `user` in the redrive's admin History, for a redrive the
    command or the API planned or cancelled. None where there is no user (no auth
    app) or no admin (its log is the admin's model)."""
    if user is None or not apps.is_installed("django.contrib.admin"):
        return
    log_entry: Any = apps.get_model("admin", "LogEntry")
    log_entry.objects.log_actions(
        user_id=user.pk,
        queryset=[redrive],
        action_flag=AUDIT_FLAGS[action],
        change_message=message,
    )
