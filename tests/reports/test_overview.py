"""reports.overview: every queue's figures for the admin in capped, bounded reads."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from deadletter.models import QueuedMessage
from deadletter.queue import store_failed_msgs
from deadletter.reports import overview, stats
from deadletter.wire import codec, keys
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message

pytestmark = pytest.mark.django_db


def test_overview_counts_depth_legacy_rows_and_nothing_for_an_empty_table() -> None:
    assert overview.overview() == []
    store_failed_msgs("q", Message(subject="a"))
    store_failed_msgs("q", Message(subject="b"))
    QueuedMessage.objects.create(key=b"q", value=b"\x80")
    (q,) = overview.overview()
    assert (q.name, q.depth, q.legacy_rows, q.causes) == ("q", overview.Count(3), 1, [])
    assert q.oldest_failure is not None


def test_counts_stop_at_the_cap_and_say_so(monkeypatch) -> None:
    for i in range(3):
        store_failed_msgs("q", Message(subject=str(i)))
    monkeypatch.setattr(overview, "COUNT_CAP", 2)
    (q,) = overview.overview()
    assert q.depth == overview.Count(2, capped=True)
    assert str(q.depth) == "2+"
    monkeypatch.setattr(overview, "COUNT_CAP", 3)
    assert str(overview.overview()[0].depth) == "3"


def test_signatures_are_listed_once_each_alphabetically_up_to_the_limit() -> None:
    for sig in ("B: y", "A: x", "B: y", None, "C: z"):
        QueuedMessage.objects.create(key=keys.new_key("q"), value=b"\xa0", signature=sig)
    assert overview.signatures() == ["A: x", "B: y", "C: z"]
    assert overview.signatures(limit=2) == ["A: x", "B: y"]


def test_causes_group_the_stored_signatures_by_queue() -> None:
    for name, sig in [("a", "E: x #"), ("a", "E: x #"), ("b", "E: x #"), ("b", None)]:
        QueuedMessage.objects.create(key=keys.new_key(name), value=b"\xa0", signature=sig)
    assert overview.causes_by_queue(["a", "b", "c"]) == {
        "a": [overview.Cause("E: x #", overview.Count(2), "a")],
        "b": [overview.Cause("E: x #", overview.Count(1), "b")],
    }


def test_overview_shows_the_figures_deadletter_stats_gives(settings) -> None:
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
    for q in overview.overview(now=at, horizon=timedelta(days=1)):
        s = figures[q.name]
        assert q.depth == overview.Count(s.depth)
        assert q.oldest_enqueued == s.oldest_enqueued_at
        assert q.oldest_failure == s.oldest_queued_at
        assert q.expiring == overview.Count(s.expiring)
    (q,) = [q for q in overview.overview() if q.name == "q"]
    assert (q.expiring, q.expired) == (overview.Count(3), overview.Count(1))
