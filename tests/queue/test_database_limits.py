"""What every backend must hold the same: key order is byte order, names that differ
only by case or a trailing space are two queues, the longest queue name works end to
end, and a message the server cannot take is refused clearly with nothing written."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from deadletter import QueueingError
from deadletter.drain import Drainer
from deadletter.models import QueuedMessage
from deadletter.queue import dequeue, fetch_failed_msgs, store_failed_msgs
from deadletter.queue.api import queue_names
from deadletter.reports import overview
from deadletter.store import counters, sql
from deadletter.wire import keys
from deadletter.wire.messages import Message
from tests.factories import insert, park, parked, table_rows

pytestmark = pytest.mark.django_db(transaction=True)

# 63 four-byte characters and three bytes more: 255 UTF-8 bytes, the longest name.
LONGEST_NAME = "🦆" * 63 + "q-x"


def test_the_table_orders_keys_byte_for_byte() -> None:
    low = [b"q", b"q\x00", b"q\x00\x00", b"q\x00\x01", b"q\x01", b"q ", b"Q", b"q\x7f", b"q\x80"]
    high = [b"q\xff", b"q\xff\x00", b"\xff", b"\x00", b"\x00\x00", b"qa", b"qA"]
    for key in low + high:
        insert(key, b"\x80")
    in_table = [
        bytes(k) for k in QueuedMessage.objects.order_by("key").values_list("key", flat=True)
    ]
    assert in_table == sorted(low + high)
    assert [k for k, _ in table_rows()] == sorted(low + high)


def test_names_that_differ_by_case_or_a_trailing_space_are_separate_queues(settings: Any) -> None:
    names = ["mail", "Mail", "mail "]
    for name in names:
        park(f"{name!r} one", f"{name!r} two", queue=name)
    assert queue_names() == sorted(names, key=str.encode)
    assert {name: len(fetch_failed_msgs(name)) for name in names} == dict.fromkeys(names, 2)
    settings.DEADLETTER_MAX_ATTEMPTS = 1
    settings.DEADLETTER_HANDLERS = dict.fromkeys(names, "tests.factories.failing_handler")
    Drainer(queues=["Mail"]).run()
    drops = counters.drop_counts(connection)
    assert {name: drops.get(name, {}).get("max_attempts", 0) for name in names} == {
        "mail": 0,
        "Mail": 2,
        "mail ": 0,
    }


def test_failure_causes_that_differ_by_case_are_two_causes(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.queue.test_database_limits.raise_subject"}
    park("Timeout at the door", "timeout at the door", queue="q")
    Drainer(queues=["q"]).run()
    assert overview.signatures() == sorted(
        ["RuntimeError: Timeout at the door", "RuntimeError: timeout at the door"]
    )


def raise_subject(msg: Message) -> None:
    raise RuntimeError(msg.subject)


def test_the_longest_queue_name_parks_reads_drains_and_counts(settings: Any) -> None:
    assert len(LONGEST_NAME.encode()) == keys.MAX_QUEUE_NAME_BYTES
    key = store_failed_msgs(LONGEST_NAME, Message(subject="ünïcødé 📬", username="名前"))
    assert len(key) == keys.MAX_QUEUE_NAME_BYTES + 17
    (item,) = fetch_failed_msgs(LONGEST_NAME)
    assert (item.msg.subject, item.msg.username) == ("ünïcødé 📬", "名前")
    assert queue_names() == [LONGEST_NAME]
    assert dequeue(key)
    park("again", queue=LONGEST_NAME)
    settings.DEADLETTER_MAX_ATTEMPTS = 1
    settings.DEADLETTER_HANDLERS = {LONGEST_NAME: "tests.factories.failing_handler"}
    Drainer(queues=[LONGEST_NAME]).run()
    assert parked(LONGEST_NAME) == []
    assert counters.drop_counts(connection)[LONGEST_NAME]["max_attempts"] == 1


@pytest.fixture
def mysql() -> None:
    if connection.vendor != "mysql":
        pytest.skip("max_allowed_packet is MySQL/MariaDB's")


def test_a_message_over_the_servers_packet_limit_is_refused_and_nothing_written(
    mysql: None, settings: Any
) -> None:
    limit = sql.max_packet(connection)
    settings.DEADLETTER_MAX_ROW_BYTES = 4 * limit
    park("before")
    # Raw, under the limit; as the driver sends it (each NUL escaped as two bytes), over.
    nuls = Message(subject="nuls", extra={"Body": b"\x00" * (limit // 2 + 1024)})
    with pytest.raises(QueueingError, match="max_allowed_packet") as raised:
        store_failed_msgs("q", nuls)
    assert f"{limit:,}" in str(raised.value)
    with pytest.raises(QueueingError, match="max_allowed_packet"):
        store_failed_msgs("q", Message(subject="big", extra={"Body": b"x" * (limit + 1)}))
    park("after")  # the connection is still the one it was, and works
    assert parked() == ["before", "after"]


def test_a_message_just_under_the_packet_limit_is_parked_and_read_back(
    mysql: None, settings: Any
) -> None:
    limit = sql.max_packet(connection)
    settings.DEADLETTER_MAX_ROW_BYTES = 4 * limit
    body = b"y" * (limit - 4096)
    key = store_failed_msgs("q", Message(subject="near", extra={"Body": body}))
    (item,) = fetch_failed_msgs("q")
    assert item.key == key and item.msg.extra["Body"] == body
