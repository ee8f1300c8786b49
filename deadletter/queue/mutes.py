"""How long a cause's mute lasts: the spans an operator picks from, or a date,
and the rule that the date is given and still ahead (`incidents.mute` writes it)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from deadletter.queue.refusals import Refused

__all__ = ["MUTE_FOR", "UNTIL", "mute_end"]

MUTE_FOR = {"hour": timedelta(hours=1), "day": timedelta(days=1), "week": timedelta(weeks=1)}
"""The spans a mute may last, by the name an edge offers them under."""
UNTIL = "until"
"""The duration that says "until the date given"."""


def mute_end(duration: str, until: datetime | None = None) -> datetime:
    """When a mute of `duration` (a `MUTE_FOR` name, or `UNTIL` with `until`) taken
    now ends; `Refused` naming `until` when that date is missing or already past."""
    if duration != UNTIL:
        return timezone.now() + MUTE_FOR[duration]
    if until is None:
        raise Refused("Give the date the mute ends.", UNTIL)
    if until <= timezone.now():
        raise Refused("The date the mute ends is already past.", UNTIL)
    return until
