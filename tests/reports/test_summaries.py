"""deadletter.reports.summaries: each queue's depth from key ranges, its head, its age."""

from __future__ import annotations

import pytest

from deadletter.reports import summaries
from deadletter.store import scans
from deadletter.wire import codec, gotime, keys
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message
from tests.factories import insert

pytestmark = pytest.mark.django_db(transaction=True)


def fill(layout: dict[str, int]) -> None:
    value = codec.encode_one(Message(subject="s", queued_at=GoTime.parse("2026-01-01T00:00:00Z")))
    for name, depth in layout.items():
        for i in range(depth):
            insert(keys.make_key(name, 1_000 + i, i), value)


@pytest.mark.parametrize(
    "layout",
    [
        {"a": 1},
        {"a": 9},
        {"a": 9, "b": 2, "c": 1},
        {"a": 1, "b": 9, "c": 2},
        {"a": 2, "b": 1, "c": 9},
        {"a": 9, "b": 8, "c": 1, "d": 7},
        {"a": 7, "b": 1, "c": 8, "d": 9},
        {"x": 5, "x/y": 6, "x y": 4, "é": 9},
    ],
)
def test_depths_are_exact_however_the_big_queues_lie(monkeypatch, layout: dict[str, int]) -> None:
    # A probe of 3 rows makes every queue over 3 rows "big", exercising each count.
    monkeypatch.setattr(scans, "PROBE_ROWS", 3)
    fill(layout)
    found = {s.name: s.depth for s in summaries.queue_statuses()}
    assert found == layout


def test_the_head_gives_the_oldest_times() -> None:
    first = GoTime.parse("2026-01-01T10:00:00.5+02:00")
    insert(keys.make_key("q", 2_000_000_000_123, 1), codec.encode_one(Message(queued_at=first)))
    insert(
        keys.make_key("q", 3_000_000_000_000, 2), codec.encode_one(Message(queued_at=GoTime.now()))
    )
    [status] = summaries.queue_statuses()
    assert status.oldest_enqueued_ns == 2_000_000_000_123
    assert status.oldest_queued_at.format() == "2026-01-01T10:00:00.5+02:00"
    now = gotime.epoch_ns(first) + 90 * 10**9
    assert status.oldest_age_seconds(now) == 90.0


def test_a_legacy_row_is_counted_but_not_decoded_for_the_head() -> None:
    insert(b"q", b"not even cbor")
    [status] = summaries.queue_statuses()
    assert (status.depth, status.oldest_enqueued_ns, status.oldest_queued_at) == (1, None, None)
    assert status.oldest_age_seconds() is None


def test_a_corrupt_head_gives_the_age_since_it_was_parked() -> None:
    insert(keys.make_key("q", 5 * 10**9, 1), b"\xff")
    [status] = summaries.queue_statuses()
    assert status.oldest_queued_at is None
    assert status.oldest_age_seconds(7 * 10**9) == 2.0


def test_one_queue_of_any_name() -> None:
    fill({"a/b": 2, "a": 1})
    assert summaries.queue_status("a/b").depth == 2
    assert summaries.queue_status("nothing").depth == 0
    with pytest.raises(ValueError, match="empty"):
        summaries.queue_status("")
