"""reports.queues: queue names a page at a time, totals by aggregate statements."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from deadletter.models import QueuedMessage
from deadletter.queue import store_failed_msgs
from deadletter.reports import queues
from deadletter.store.counters import record_drop
from deadletter.wire.messages import Message
from tests.reports.many_queues import park_one_row_queues

pytestmark = pytest.mark.django_db


def test_pages_walk_every_queue_once_in_name_order_both_ways() -> None:
    names = park_one_row_queues(7)
    QueuedMessage.objects.create(key=b"spam-00003", value=b"\x80")  # a legacy row: same queue
    first = queues.page_after(None, 3)
    assert (first.names, first.more_before, first.more_after) == (names[:3], False, True)
    second = queues.page_after(first.names[-1], 3)
    assert (second.names, second.more_before, second.more_after) == (names[3:6], True, True)
    last = queues.page_after(second.names[-1], 3)
    assert (last.names, last.more_before, last.more_after) == (names[6:], True, False)
    back = queues.page_before(last.names[0], 3)
    assert (back.names, back.more_before, back.more_after) == (names[3:6], True, True)
    assert queues.page_before(back.names[0], 3).names == names[:3]
    assert not queues.page_before(names[0], 3).more_before


def test_a_queue_whose_name_extends_another_is_its_own_page_entry() -> None:
    for name in ("a", "a\x01", "ab", "b"):
        store_failed_msgs(name, Message(subject=name))
    assert queues.page_after(None, 10).names == ["a", "a\x01", "ab", "b"]
    assert queues.page_after("a", 10).names == ["a\x01", "ab", "b"]
    assert queues.page_before("b", 10).names == ["a", "a\x01", "ab"]


def test_a_page_is_two_statements_however_many_queues_there_are() -> None:
    park_one_row_queues(3000)
    with CaptureQueriesContext(connection) as ctx:
        page = queues.page_after("spam-01000", 50)
    assert len(page.names) == 50 and page.names[0] == "spam-01001"
    assert len(ctx.captured_queries) == 2


def test_totals_are_exact_over_every_queue_in_three_statements() -> None:
    park_one_row_queues(3000)
    QueuedMessage.objects.filter(key__gte=b"spam-00010", key__lt=b"spam-00012").update(
        due_at=datetime.now(UTC) + timedelta(hours=1)
    )
    record_drop(connection, "gone", "expired", 4)
    record_drop(connection, "spam-00001", "permanent", 2)
    with CaptureQueriesContext(connection) as ctx:
        found = queues.totals(datetime.now(UTC))
    assert (found.rows, found.waiting) == (3000, 2)
    assert found.dropped == {"expired": 4, "corrupt": 0, "permanent": 2, "max_attempts": 0}
    assert len(ctx.captured_queries) == 3


def test_a_queue_is_known_by_its_rows_its_handler_or_its_drops(settings) -> None:
    settings.DEADLETTER_HANDLERS = {"configured": "tests.factories.ok_handler"}
    store_failed_msgs("parked", Message(subject="x"))
    record_drop(connection, "dropped", "expired", 1)
    assert [queues.is_known_queue(n) for n in ("configured", "parked", "dropped", "nope")] == [
        True,
        True,
        True,
        False,
    ]
