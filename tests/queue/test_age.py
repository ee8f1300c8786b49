from __future__ import annotations

from datetime import timedelta

from deadletter.queue import age
from deadletter.wire.gotime import GoTime

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


NOW_NS = 40 * DAY_NS
SKEW_NS = age.MAX_CLOCK_SKEW_NS


def test_the_clock_skew_allowed_is_five_minutes() -> None:
    assert timedelta(minutes=5) == age.MAX_CLOCK_SKEW
    assert SKEW_NS == 300 * 10**9


def test_a_first_failure_up_to_the_skew_ahead_passes_and_one_past_it_is_refused() -> None:
    assert age.first_failure_error(GoTime(NOW_NS + SKEW_NS), NOW_NS) is None
    error = age.first_failure_error(GoTime(NOW_NS + SKEW_NS + 1), NOW_NS)
    assert error is not None
    assert error.startswith("queued_at 1970-02-10T00:05:00.000000001Z is in the future")


def test_past_unset_and_far_future_first_failures() -> None:
    assert age.first_failure_error(None, NOW_NS) is None
    assert age.first_failure_error(GoTime.parse("0000-06-01T00:00:00Z")) is None
    assert age.first_failure_error(GoTime.parse("9999-12-15T00:00:00Z")) is not None
    assert age.first_failure_error(GoTime.parse("9999-12-31T23:00:00-24:00")) is not None
