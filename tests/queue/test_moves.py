"""A move rewrites only the key's queue prefix, in one transaction: the row keeps its
time and sequence (so its order), its value (carrying `Origin`, its first key),
signature and due time, and is in exactly one queue afterwards."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from deadletter.models import QueuedMessage
from deadletter.queue.moves import ORIGIN_KEY, MoveConflict, move_msg, moved_key, origin_of
from deadletter.wire import codec, keys
from deadletter.wire.messages import Message
from tests.drain.drain_harness import claim_held_by_another_thread
from tests.factories import insert, insert_at, park, parked, parked_messages, table_rows

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_move_keeps_the_time_and_sequence_of_the_key() -> None:
    key = insert_at("q", 1_700_000_000_000_000_000, 42, Message(subject="a"))
    new_key = move_msg(key, "other")
    assert new_key == keys.make_key("other", 1_700_000_000_000_000_000, 42)
    assert keys.parse_key(new_key)[1:] == keys.parse_key(key)[1:]


def test_a_moved_row_is_in_the_destination_only_its_bytes_with_its_origin() -> None:
    (key,) = park("a")
    value = dict(table_rows())[key]
    new_key = move_msg(key, "other")
    original = codec.decode_single(value)
    assert original is not None
    with_origin = original.replace(extra={ORIGIN_KEY: key.hex()})
    assert dict(table_rows()) == {new_key: codec.encode_one(with_origin)}
    assert parked("q") == [] and parked("other") == ["a"]


def test_a_row_moved_again_keeps_its_first_origin_and_its_bytes() -> None:
    (key,) = park("a")
    second = move_msg(key, "other")
    assert second is not None
    value = dict(table_rows())[second]
    third = move_msg(second, "third")
    assert third is not None
    assert dict(table_rows()) == {third: value}
    assert origin_of(third, parked_messages("third")[0]) == key.hex()


def test_moved_rows_keep_their_order_among_the_destinations_rows() -> None:
    early = insert_at("q", 1_000, 1, Message(subject="early"))
    insert_at("other", 2_000, 1, Message(subject="middle"))
    late = insert_at("q", 3_000, 1, Message(subject="late"))
    move_msg(late, "other")
    move_msg(early, "other")
    assert [m.subject for m in (codec.decode_single(v) for _, v in table_rows())] == [
        "early",
        "middle",
        "late",
    ]


def test_a_move_keeps_the_signature_and_due_time_and_marks_the_row_for_the_index() -> None:
    (key,) = park("a")
    due = datetime.now(UTC) + timedelta(hours=1)
    QueuedMessage.objects.filter(key=key).update(signature="ConnectionError: #", due_at=due)
    QueuedMessage.objects.filter(key=key).update(search_pending=None)
    new_key = move_msg(key, "other")
    row = QueuedMessage.objects.get(key=new_key)
    assert row.signature == "ConnectionError: #"
    assert abs((row.due_at - due).total_seconds()) < 1
    assert row.search_pending == 1


def test_a_gone_row_is_not_moved() -> None:
    (key,) = park("a")
    QueuedMessage.objects.filter(key=key).delete()
    assert move_msg(key, "other") is None
    assert table_rows() == []


def test_a_taken_destination_key_leaves_the_source_where_it_was() -> None:
    key = insert_at("q", 5_000, 7, Message(subject="mine"))
    insert_at("other", 5_000, 7, Message(subject="theirs"))
    with pytest.raises(MoveConflict, match="already holds a row"):
        move_msg(key, "other")
    assert parked("q") == ["mine"] and parked("other") == ["theirs"]


def test_a_legacy_aggregate_row_is_refused() -> None:
    insert(b"q", codec.encode([Message(subject="a")]))
    with pytest.raises(ValueError, match="legacy aggregate row cannot be moved"):
        move_msg(b"q", "other")
    assert [k for k, _ in table_rows()] == [b"q"]


def test_a_move_into_its_own_queue_or_an_invalid_name_is_refused() -> None:
    (key,) = park("a")
    with pytest.raises(ValueError, match="its own queue"):
        move_msg(key, "q")
    with pytest.raises(ValueError):
        moved_key(key, "bad\x00name")
    assert parked("q") == ["a"]


@pytest.mark.skipif(connection.vendor == "sqlite", reason="row locks need a server")
def test_a_row_a_drain_holds_is_skipped() -> None:
    first, second = park("first", "second")
    with claim_held_by_another_thread("q") as held:
        assert held == first
        assert move_msg(first, "other") is None
        assert move_msg(second, "other") is not None
    assert parked("q") == ["first"] and parked("other") == ["second"]
