from __future__ import annotations

import pytest

from deadletter.models import QueuedMessage
from deadletter.queue import store_failed_msgs
from deadletter.reports import inspection
from deadletter.urls import KeyConverter
from deadletter.wire import keys
from deadletter.wire.messages import Message

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
    assert (q.name, q.depth, q.legacy_rows, q.causes) == ("q", inspection.Count(3), 1, [])
    assert q.oldest_failure is not None


def test_counts_stop_at_the_cap_and_say_so(monkeypatch) -> None:
    for i in range(3):
        store_failed_msgs("q", Message(subject=str(i)))
    monkeypatch.setattr(inspection, "COUNT_CAP", 2)
    (q,) = inspection.overview()
    assert q.depth == inspection.Count(2, capped=True)
    assert str(q.depth) == "2+"
    monkeypatch.setattr(inspection, "COUNT_CAP", 3)
    assert str(inspection.overview()[0].depth) == "3"


def test_queue_names_in_one_statement_match_the_queue_modules(
    django_assert_num_queries,
) -> None:
    from deadletter import queue

    for name in ("a", "a-b", "ab", "b", "ž-queue"):
        store_failed_msgs(name, Message(subject=name))
    QueuedMessage.objects.create(key=b"c", value=b"\x80")  # a legacy row alone
    QueuedMessage.objects.create(key=b"a", value=b"\x80")  # a legacy row before messages
    QueuedMessage.objects.create(key=b"d-no-separator-" + bytes(20), value=b"\xa0")
    with django_assert_num_queries(1):
        names = inspection.queue_names()
    assert names == queue.queue_names()
    assert names[:5] == ["a", "a-b", "ab", "b", "c"]


def test_signatures_are_listed_once_each_alphabetically_up_to_the_limit() -> None:
    for sig in ("B: y", "A: x", "B: y", None, "C: z"):
        QueuedMessage.objects.create(key=keys.new_key("q"), value=b"\xa0", signature=sig)
    assert inspection.signatures() == ["A: x", "B: y", "C: z"]
    assert inspection.signatures(limit=2) == ["A: x", "B: y"]


def test_causes_group_the_stored_signatures_by_queue() -> None:
    for name, sig in [("a", "E: x #"), ("a", "E: x #"), ("b", "E: x #"), ("b", None)]:
        QueuedMessage.objects.create(key=keys.new_key(name), value=b"\xa0", signature=sig)
    assert inspection.causes_by_queue(["a", "b", "c"]) == {
        "a": [inspection.Cause("E: x #", inspection.Count(2), "a")],
        "b": [inspection.Cause("E: x #", inspection.Count(1), "b")],
    }


def test_overview_shows_the_figures_deadletter_stats_gives(settings) -> None:
    import time
    from datetime import UTC, datetime, timedelta

    from deadletter.reports import stats
    from deadletter.wire import codec
    from deadletter.wire.gotime import GoTime

    settings.DEADLETTER_MAX_QUEUE_AGE = timedelta(days=30)
    now = time.time_ns()
    day = 86_400 * 10**9
    for days_ago in (40, 29.5, 29.2, 3):  # expired, two expiring within a day, fresh
        parked = now - int(days_ago * day)
        msg = Message(subject=str(days_ago), queued_at=GoTime.from_unix_ns(parked - 10**9))
        key = keys.make_key("q", parked, 1)
        QueuedMessage.objects.create(key=key, value=codec.encode_one(msg))
    store_failed_msgs("other", Message(subject="fresh"))
    figures = {s.name: s for s in stats.collect(now_ns=now, attempts_sample=0).queues}
    at = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=now // 1000)
    for q in inspection.overview(now=at, horizon=timedelta(days=1)):
        s = figures[q.name]
        assert q.depth == inspection.Count(s.depth)
        assert q.oldest_enqueued == s.oldest_enqueued_at
        assert q.oldest_failure == s.oldest_queued_at
        assert q.expiring == inspection.Count(s.expiring)
    (q,) = [q for q in inspection.overview() if q.name == "q"]
    assert (q.expiring, q.expired) == (inspection.Count(3), inspection.Count(1))
