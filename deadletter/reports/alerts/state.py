"""The sent state of alerts: one `AlertState` row per (rule, queue, subject).

Firing inserts the row (or turns a cleared one firing again); sending claims it
first with one UPDATE whose WHERE says "not sent and not claimed by another
evaluator in time" (`sent_at IS NULL AND (claimed_until IS NULL OR claimed_until
< now)`): the database gives each row to one evaluator, so two evaluating at once
never send the same alert twice. The winner marks `sent_at` once its channels
took the alert. A clear is the same for the "resolved" note (`cleared_sent_at`).

Two rows of the table are bookkeeping, not alerts: the digest's (rule "digest":
`sent_at` is when the last digest went out, claimed the same way) and the causes'
watermark (rule "looked": `fired_at` is when an evaluation last read new causes).
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q, QuerySet

from deadletter.conf import ALERT_RULES, conf
from deadletter.models import AlertState

__all__ = [
    "CLAIM_FOR",
    "DIGEST_RULE",
    "LOOKED_RULE",
    "claim_digest",
    "claim_firing",
    "claim_resolved",
    "clear",
    "evaluator_id",
    "fire",
    "firing_rows",
    "last_digest",
    "last_looked",
    "looked",
    "mark_resolved_sent",
    "mark_sent",
    "release",
    "stored",
    "unsent_resolved",
]

CLAIM_FOR = timedelta(minutes=2)
"""How long a claim holds a row for its evaluator: past it (the evaluator died
while sending) another may send the alert."""

DIGEST_RULE = "digest"
LOOKED_RULE = "looked"

Key = tuple[str, str, str]  # (rule, queue, subject)


def evaluator_id() -> str:
    """Who claims: this host and process, and a token of the evaluation."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"[:200]


def _rows() -> QuerySet[AlertState]:
    return AlertState.objects.using(conf.DATABASE).all()


def _free(now: datetime) -> Q:
    return Q(claimed_until__isnull=True) | Q(claimed_until__lt=now)


def key_of(row: AlertState) -> Key:
    return (row.rule, row.queue, row.subject)


def stored(row: AlertState) -> dict[str, Any]:
    """What was stored when the row fired: its title and figures."""
    try:
        found = json.loads(row.figures or "{}")
    except ValueError:
        found = {}
    return found if isinstance(found, dict) else {}


def firing_rows() -> list[AlertState]:
    """Every alert firing now (sent or not)."""
    return list(_rows().filter(state=AlertState.State.FIRING, rule__in=ALERT_RULES))


def fire(key: Key, title: str, figures: dict[str, Any], now: datetime) -> bool:
    """Turn the alert `key` firing, to be sent: insert its row, or turn it firing
    again when it had cleared; False when it was firing already (sent or not)."""
    rule, queue, subject = key
    text = json.dumps({"title": title, "figures": figures}, default=str)
    made = AlertState(rule=rule, queue=queue, subject=subject, fired_at=now, figures=text)
    _rows().bulk_create([made], ignore_conflicts=True)
    again = (
        _rows()
        .filter(rule=rule, queue=queue, subject=subject, state=AlertState.State.CLEARED)
        .update(**_firing(now, text))
    )
    created = _rows().filter(rule=rule, queue=queue, subject=subject, fired_at=now, sent_at=None)
    return bool(again) or created.exists()


def refire(row: AlertState, opened_at: datetime, now: datetime, title: str, figures: Any) -> bool:
    """Fire a cause's alert again for a later opening of its cause (resolved and
    seen again between two evaluations): once, however many evaluators try."""
    text = json.dumps({"title": title, "figures": figures}, default=str)
    return bool(_rows().filter(id=row.id, fired_at__lt=opened_at).update(**_firing(now, text)))


def _firing(now: datetime, text: str) -> dict[str, Any]:
    return {
        "state": AlertState.State.FIRING,
        "fired_at": now,
        "sent_at": None,
        "cleared_at": None,
        "cleared_sent_at": None,
        "claimed_by": "",
        "claimed_until": None,
        "figures": text,
    }


def clear(row: AlertState, now: datetime) -> bool:
    """The alert no longer holds: cleared, its "resolved" note to go once when the
    alert itself went out (one never sent has nothing to resolve)."""
    firing = _rows().filter(id=row.id, state=AlertState.State.FIRING)
    unsent = firing.filter(sent_at__isnull=True).update(
        state=AlertState.State.CLEARED, cleared_at=now, cleared_sent_at=now
    )
    sent = firing.filter(sent_at__isnull=False).update(
        state=AlertState.State.CLEARED, cleared_at=now, cleared_sent_at=None
    )
    return bool(unsent or sent)


def unsent(keys: Iterable[Key]) -> list[AlertState]:
    """The rows of `keys` firing and not sent yet."""
    wanted = set(keys)
    rows = _rows().filter(state=AlertState.State.FIRING, sent_at__isnull=True, rule__in=ALERT_RULES)
    return [row for row in rows if key_of(row) in wanted]


def unsent_resolved() -> list[AlertState]:
    """Cleared alerts whose "resolved" note has not gone out."""
    return list(
        _rows().filter(
            state=AlertState.State.CLEARED,
            rule__in=ALERT_RULES,
            sent_at__isnull=False,
            cleared_sent_at__isnull=True,
        )
    )


def claim_firing(ids: Sequence[int], me: str, now: datetime) -> set[int]:
    """Claim the unsent firing rows `ids` for `me`: the ids this evaluator won."""
    return _claim(
        _rows().filter(id__in=ids, state=AlertState.State.FIRING, sent_at__isnull=True), me, now
    )


def claim_resolved(ids: Sequence[int], me: str, now: datetime) -> set[int]:
    """Claim the cleared rows `ids` whose "resolved" note is unsent."""
    rows = _rows().filter(id__in=ids, state=AlertState.State.CLEARED, cleared_sent_at__isnull=True)
    return _claim(rows, me, now)


def _claim(rows: QuerySet[AlertState], me: str, now: datetime) -> set[int]:
    if not rows.filter(_free(now)).update(claimed_by=me, claimed_until=now + CLAIM_FOR):
        return set()
    return set(rows.filter(claimed_by=me).values_list("id", flat=True))


def mark_sent(ids: Iterable[int], me: str, now: datetime) -> None:
    _rows().filter(id__in=list(ids), claimed_by=me, state=AlertState.State.FIRING).update(
        sent_at=now, claimed_by="", claimed_until=None
    )


def mark_resolved_sent(ids: Iterable[int], me: str, now: datetime) -> None:
    _rows().filter(id__in=list(ids), claimed_by=me).update(
        cleared_sent_at=now, claimed_by="", claimed_until=None
    )


def release(ids: Iterable[int], me: str) -> None:
    """Give claimed rows back unsent (the next evaluation sends them)."""
    _rows().filter(id__in=list(ids), claimed_by=me).update(claimed_by="", claimed_until=None)


def _bookkeeping(rule: str, now: datetime) -> QuerySet[AlertState]:
    row = AlertState(rule=rule, fired_at=now, state=AlertState.State.CLEARED, cleared_sent_at=now)
    _rows().bulk_create([row], ignore_conflicts=True)
    return _rows().filter(rule=rule, queue="", subject="")


def last_digest() -> datetime | None:
    """When the last digest went out."""
    row = _rows().filter(rule=DIGEST_RULE, queue="", subject="").first()
    return None if row is None else row.sent_at


def claim_digest(now: datetime, every: timedelta) -> bool:
    """Whether this evaluation may send a digest now: at most one per `every`,
    whoever evaluates."""
    slot = _bookkeeping(DIGEST_RULE, now)
    due = Q(sent_at__isnull=True) | Q(sent_at__lte=now - every)
    return bool(slot.filter(due).update(sent_at=now))


def last_looked() -> datetime | None:
    """When an evaluation last read the causes opened since."""
    row = _rows().filter(rule=LOOKED_RULE, queue="", subject="").first()
    return None if row is None else row.fired_at


def looked(now: datetime) -> None:
    _bookkeeping(LOOKED_RULE, now).filter(fired_at__lt=now).update(fired_at=now)
