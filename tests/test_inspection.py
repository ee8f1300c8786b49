from __future__ import annotations

import pytest

from deadletter import inspection, keys
from deadletter.messages import Message
from deadletter.models import QueuedMessage
from deadletter.queue import store_failed_msgs
from deadletter.urls import KeyConverter

pytestmark = pytest.mark.django_db


def test_page_rows_continues_after_the_given_key() -> None:
    stored = [store_failed_msgs("q", Message(subject=str(i))) for i in range(4)]
    page = inspection.page_rows("q", after=stored[1], limit=10)
    assert [row.key for row in page] == stored[2:]


def test_page_rows_shows_a_legacy_row_first_and_leaves_it_in_place() -> None:
    store_failed_msgs("q", Message(subject="per-message"))
    QueuedMessage.objects.create(key=b"q", value=b"\x80")
    page = inspection.page_rows("q")
    assert page[0].is_legacy
    assert QueuedMessage.objects.filter(key=b"q").exists()


def test_page_rows_refuses_a_limit_out_of_range() -> None:
    with pytest.raises(ValueError, match="limit"):
        inspection.page_rows("q", limit=inspection.MAX_PAGE + 1)


def test_summary_of_an_empty_queue_has_no_age() -> None:
    assert inspection.summarize("empty") == inspection.QueueSummary("empty", 0, None, None)


def test_key_converter_round_trips_hex() -> None:
    key = keys.new_key("q")
    converter = KeyConverter()
    assert converter.to_python(converter.to_url(key)) == key


def test_key_converter_refuses_odd_length_hex() -> None:
    with pytest.raises(ValueError, match="not a key"):
        KeyConverter().to_python("abc")


def test_expired_keys_are_the_rows_parked_before_the_age_cutoff(settings) -> None:
    import time
    from datetime import timedelta

    settings.DEADLETTER_MAX_QUEUE_AGE = timedelta(days=1)
    now = time.time_ns()
    old = keys.make_key("q", now - 2 * 86_400 * 10**9, 1)
    QueuedMessage.objects.create(key=old, value=b"\xa0")
    store_failed_msgs("q", Message(subject="fresh"))
    assert inspection.expired_keys("q") == [old]


def test_overview_counts_depth_legacy_rows_and_nothing_for_an_empty_table() -> None:
    assert inspection.overview() == []
    store_failed_msgs("q", Message(subject="a"))
    store_failed_msgs("q", Message(subject="b"))
    QueuedMessage.objects.create(key=b"q", value=b"\x80")
    (q,) = inspection.overview()
    assert (q.name, q.depth, q.legacy_rows, q.causes) == ("q", 3, 1, [])
    assert q.oldest_failure is not None


def test_causes_group_the_stored_signatures_by_queue() -> None:
    for name, sig in [("a", "E: x #"), ("a", "E: x #"), ("b", "E: x #"), ("b", None)]:
        QueuedMessage.objects.create(key=keys.new_key(name), value=b"\xa0", signature=sig)
    assert inspection.causes_by_queue() == {
        "a": [inspection.Cause("E: x #", 2, "a")],
        "b": [inspection.Cause("E: x #", 1, "b")],
    }
    assert inspection.causes() == [inspection.Cause("E: x #", 3)]
