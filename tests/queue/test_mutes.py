"""A mute's end: a span from now, or a date that is given and still ahead; a
date missing or past is refused naming `until`."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from deadletter.queue import mutes
from deadletter.queue.refusals import Refused


def test_a_span_ends_that_long_from_now() -> None:
    before = timezone.now()
    ends = mutes.mute_end("day")
    assert before + timedelta(days=1) <= ends <= timezone.now() + timedelta(days=1)


def test_a_date_ahead_is_the_end() -> None:
    when = timezone.now() + timedelta(days=3)
    assert mutes.mute_end(mutes.UNTIL, when) == when


@pytest.mark.parametrize(
    ("until", "said"),
    [(None, "Give the date"), (timezone.now() - timedelta(minutes=1), "already past")],
)
def test_a_date_missing_or_past_is_refused_naming_until(until: datetime | None, said: str) -> None:
    with pytest.raises(Refused, match=said) as refused:
        mutes.mute_end(mutes.UNTIL, until)
    assert refused.value.field == "until"
