"""store.counters: every drop counted by queue and reason, in the dropping transaction."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction

from deadletter import queue
from deadletter.models import DropCount
from deadletter.queue import settlements
from deadletter.store import sql
from deadletter.store.counters import drop_counts, record_drop
from deadletter.wire import codec, keys
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message
from tests.factories import DAY, insert

pytestmark = pytest.mark.django_db(transaction=True)


def aged(days_ago: float, subject: str = "s") -> Message:
    return Message(subject=subject, queued_at=GoTime(GoTime.now().unix_ns - int(days_ago * DAY)))


def counts(name: str) -> dict[str, int]:
    return drop_counts(sql.connection(), [name]).get(name, {})


@pytest.fixture(autouse=True)
def limits(settings) -> None:
    settings.DEADLETTER_MAX_QUEUE_AGE = timedelta(days=30)


def test_record_drop_adds_up_per_queue_and_reason() -> None:
    c = sql.connection()
    record_drop(c, "mail", "expired", 2)
    record_drop(c, "mail", "expired")
    record_drop(c, "mail", "corrupt", 0)
    record_drop(c, "hooks", "permanent")
    assert counts("mail") == {"expired": 3, "corrupt": 0, "permanent": 0, "max_attempts": 0}
    assert counts("hooks")["permanent"] == 1
    with pytest.raises(ValueError, match="unknown drop reason"):
        record_drop(c, "mail", "bored")


def test_a_rolled_back_drop_is_not_counted() -> None:
    key = queue.store_failed_msgs("mail", Message(subject="s"))
    with pytest.raises(RuntimeError), transaction.atomic():
        assert settlements.drop_msg(key, None, "permanent")
        raise RuntimeError("the caller's transaction fails")
    assert counts("mail") == {}
    assert DropCount.objects.count() == 0


def test_fetch_counts_expired_and_corrupt_rows() -> None:
    insert(keys.make_key("mail", 1, 1), codec.encode_one(aged(31)))
    insert(keys.make_key("mail", 2, 2), b"\xff not cbor")
    # A row of two messages, one expired: the row is rewritten, one drop counted.
    insert(keys.make_key("mail", 3, 3), codec.encode([aged(45), aged(1, "kept")]))
    insert(keys.make_key("mail", 4, 4), codec.encode_one(aged(2)))
    assert [q.msg.subject for q in queue.fetch_failed_msgs("mail")] == ["kept", "s"]
    assert counts("mail") == {"expired": 2, "corrupt": 1, "permanent": 0, "max_attempts": 0}


def test_a_legacy_split_counts_its_expired_messages() -> None:
    insert(b"mail", codec.encode([aged(40), aged(35), aged(1, "kept")]))
    assert [q.msg.subject for q in queue.fetch_failed_msgs("mail")] == ["kept"]
    assert counts("mail")["expired"] == 2


def test_drain_drops_are_counted_by_outcome() -> None:
    from deadletter import drain
    from deadletter.exceptions import PermanentFailure

    def refuse(msg: Message) -> None:
        raise PermanentFailure("no such recipient")

    def fail(msg: Message) -> None:
        raise ConnectionError("down")

    queue.store_failed_msgs("mail", Message(subject="a"))
    queue.store_failed_msgs("mail", Message(subject="b", extra={"Attempts": 2}))
    first, second = queue.fetch_failed_msgs("mail")
    assert drain.deliver(first, refuse) is drain.Outcome.PERMANENT
    assert drain.deliver(second, fail, max_attempts=3) is drain.Outcome.MAX_ATTEMPTS
    assert counts("mail") == {"expired": 0, "corrupt": 0, "permanent": 1, "max_attempts": 1}


def test_a_row_already_gone_is_not_counted_again() -> None:
    key = queue.store_failed_msgs("mail", Message(subject="s"))
    assert settlements.drop_msg(key, None, "max_attempts")
    assert not settlements.drop_msg(key, None, "max_attempts")
    assert counts("mail")["max_attempts"] == 1
