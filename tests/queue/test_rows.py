"""The row rules tell the caller what they drop, once the drop has committed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction

from deadletter import queue
from deadletter.models import QueuedMessage
from deadletter.queue import claims, rows, settlements
from deadletter.queue.rows import Dropped, DropReason
from deadletter.wire import codec, keys
from deadletter.wire.messages import Message

pytestmark = pytest.mark.django_db(transaction=True)

OLD = datetime.now(UTC) - timedelta(days=400)


def test_drop_reasons_are_the_counters_reasons() -> None:
    from deadletter.store.counters import DROP_REASONS

    assert tuple(DropReason) == DROP_REASONS


def test_a_scan_tells_on_drop_each_expired_message_and_corrupt_row() -> None:
    expired_key = keys.new_key("q")
    QueuedMessage.objects.create(
        key=expired_key, value=codec.encode_one(Message(subject="old", queued_at=OLD))
    )
    corrupt_key = keys.new_key("q")
    QueuedMessage.objects.create(key=corrupt_key, value=b"corrupted cbor data")
    live = queue.store_failed_msgs("q", Message(subject="live"))
    dropped: list[Dropped] = []
    assert [q.key for q in queue.iter_failed_msgs("q", on_drop=dropped.append)] == [live]
    assert [(d.key, d.reason) for d in dropped] == [
        (expired_key, DropReason.EXPIRED),
        (corrupt_key, DropReason.CORRUPT),
    ]
    assert dropped[0].msg is not None and dropped[0].msg.subject == "old"
    assert dropped[1].msg is None


def test_a_drop_rolled_back_with_its_claim_is_never_told() -> None:
    key = keys.new_key("q")
    QueuedMessage.objects.create(key=key, value=b"corrupted cbor data")
    dropped: list[Dropped] = []
    with pytest.raises(RuntimeError), transaction.atomic():
        assert claims.fetch_msg(key, on_drop=dropped.append) is None
        raise RuntimeError("the claim transaction fails")
    assert dropped == []
    assert QueuedMessage.objects.filter(key=key).exists()


def test_a_drop_by_the_drain_counts_under_its_reason() -> None:
    from django.db import connection

    from deadletter.store.counters import drop_counts

    key = queue.store_failed_msgs("q", Message(subject="refused"))
    assert settlements.drop_msg(key, None, DropReason.PERMANENT)
    assert not settlements.drop_msg(key, None, DropReason.PERMANENT)
    assert drop_counts(connection, ["q"])["q"]["permanent"] == 1
    with pytest.raises(ValueError):
        settlements.drop_msg(key, None, "lost")


def _common(key: bytes, value: bytes, max_row_bytes: int = 1 << 20) -> Message | None:
    cutoff = int((datetime.now(UTC) - timedelta(days=30)).timestamp() * 1e9)
    return rows.common_message(key, value, cutoff, max_row_bytes)


def test_the_common_row_is_read_with_no_rule_applied() -> None:
    msg = Message(subject="ok", queued_at=datetime.now(UTC), extra={"Endpoint": "https://x"})
    assert _common(keys.new_key("q"), codec.encode_one(msg)) == msg


@pytest.mark.parametrize(
    ("what", "key", "value"),
    [
        ("no separator", b"q", codec.encode_one(Message(queued_at=datetime.now(UTC)))),
        ("never stamped", None, codec.encode_one(Message())),
        (
            "expired",
            None,
            codec.encode_one(Message(queued_at=datetime.now(UTC) - timedelta(days=31))),
        ),
        ("corrupt", None, b"\x81\xa1corrupt"),
        ("empty", None, b""),
        ("two messages", None, codec.encode([Message(queued_at=datetime.now(UTC))] * 2)),
    ],
)
def test_every_other_row_is_left_to_the_rules(what: str, key: bytes | None, value: bytes) -> None:
    assert _common(key or keys.new_key("q"), value) is None


def test_a_row_over_the_size_limit_is_left_to_the_rules() -> None:
    value = codec.encode_one(Message(subject="x" * 100, queued_at=datetime.now(UTC)))
    assert _common(keys.new_key("q"), value, max_row_bytes=len(value)) is not None
    assert _common(keys.new_key("q"), value, max_row_bytes=len(value) - 1) is None


def _page() -> list[tuple[bytes, bytes]]:
    """A page with a common row before and after each kind of row the rules must see."""
    now = datetime.now(UTC)
    common = codec.encode_one(Message(subject="ok", queued_at=now, extra={"Endpoint": "x"}))
    others = [
        (b"q", common),
        (keys.new_key("q"), codec.encode_one(Message())),
        (keys.new_key("q"), codec.encode_one(Message(queued_at=now - timedelta(days=31)))),
        (keys.new_key("q"), b"\x81\xa1corrupt"),
        (keys.new_key("q"), b""),
        (keys.new_key("q"), codec.encode([Message(queued_at=now)] * 2)),
        (keys.new_key("q"), codec.encode_one(Message(subject="x" * 2000, queued_at=now))),
        (keys.new_key("q"), b"\xd9\xd9\xf7" + common),
    ]
    page = [(keys.new_key("q"), common)]
    for row in others:
        page += [row, (keys.new_key("q"), common)]
    return page


def _read_page(page: list[tuple[bytes, bytes]]) -> list[tuple[int, list[rows.Queued]]]:
    """Every call a scan makes of `common_messages` over `page`, with where it began,
    passing each row it is handed back to the rules."""
    cutoff = int((datetime.now(UTC) - timedelta(days=30)).timestamp() * 1e9)
    calls, index = [], 0
    while index < len(page):
        found, after = rows.common_messages(page, index, cutoff, 1000)
        calls.append((index, found))
        index = after if found else index + 1
    return calls


def test_a_page_is_read_in_runs_of_common_rows_each_ending_at_a_row_for_the_rules() -> None:
    page = _page()
    calls = _read_page(page)
    handed_back = [start for start, found in calls if not found]
    assert handed_back == list(range(1, len(page), 2))
    assert all(_common(*page[at], max_row_bytes=1000) is None for at in handed_back)
    read = [queued.key for _, found in calls for queued in found]
    assert read == [key for key, _ in page[::2]]


def test_a_run_of_common_rows_is_read_a_few_dozen_at_a_time() -> None:
    value = codec.encode_one(Message(subject="ok", queued_at=datetime.now(UTC)))
    page = [(keys.new_key("q"), value) for _ in range(rows.COMMON_RUN * 3 + 5)]
    calls = _read_page(page)
    assert [len(found) for _, found in calls] == [rows.COMMON_RUN] * 3 + [5]


def test_a_page_reads_the_same_with_and_without_the_c_speed_up() -> None:
    page = _page()
    with_c = _read_page(page)
    with codec.python_only():
        assert codec.read_rows is None
        assert _read_page(page) == with_c
    assert all(type(queued) is rows.Queued for _, found in with_c for queued in found)


@pytest.mark.parametrize(
    ("extra", "count"),
    [
        ({}, 0),
        ({"Attempts": 0}, 0),
        ({"Attempts": 7}, 7),
        ({"Attempts": -1}, None),
        ({"Attempts": True}, None),
        ({"Attempts": 2.0}, None),
        ({"Attempts": "3"}, None),
        ({"Attempts": None}, None),
    ],
)
def test_the_attempt_count_is_a_count_or_corrupt_never_a_guess(
    extra: dict[str, object], count: int | None
) -> None:
    assert rows.attempts_of(extra) == count
    assert rows.Queued(b"q\x00" + bytes(16), Message(extra=extra)).attempts == (count or 0)


@pytest.mark.django_db
def test_the_admin_shows_a_corrupt_count_as_corrupt_not_as_a_number() -> None:
    from deadletter.admin import rows as admin_rows

    assert admin_rows.attempts(Message(extra={"Attempts": -4})) == admin_rows.CORRUPT_COUNT
    assert admin_rows.attempts(Message(extra={"Attempts": 4})) == 4
    assert admin_rows.attempts(None) == 0
