from __future__ import annotations

from datetime import timedelta

from deadletter import age
from deadletter.gotime import GoTime

DAY_NS = 86_400 * 10**9


def test_max_age_is_the_setting_in_nanoseconds(settings) -> None:
    settings.DEADLETTER_MAX_QUEUE_AGE = timedelta(days=2, microseconds=3)
    assert age.max_age_ns() == 2 * DAY_NS + 3_000


def test_a_message_older_than_the_cutoff_is_expired_and_one_at_it_is_not() -> None:
    cutoff = age.cutoff_ns(now_ns=40 * DAY_NS, max_age=30 * DAY_NS)
    assert cutoff == 10 * DAY_NS
    assert age.expired(GoTime(10 * DAY_NS - 1), cutoff)
    assert not age.expired(GoTime(10 * DAY_NS), cutoff)


def test_a_message_never_stamped_is_not_expired() -> None:
    assert not age.expired(None, age.cutoff_ns())
