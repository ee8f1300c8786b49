"""reports.expiry: a message near the age limit is warned about once, logged and signalled."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest

from deadletter import queue, signals
from deadletter.models import ExpiryWarning
from deadletter.reports import expiry
from tests.factories import park_aged

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def received() -> Any:
    seen: list[dict[str, Any]] = []

    def receiver(sender: str, **kwargs: Any) -> None:
        seen.append({"sender": sender, **kwargs})

    signals.message_expiring.connect(receiver, dispatch_uid="test_expiry")
    yield seen
    signals.message_expiring.disconnect(dispatch_uid="test_expiry")


@pytest.fixture(autouse=True)
def limits(settings) -> None:
    settings.DEADLETTER_MAX_QUEUE_AGE = timedelta(days=30)
    settings.DEADLETTER_EXPIRY_WARNING = timedelta(days=3)


def test_nothing_is_warned_without_the_setting(settings, received) -> None:
    settings.DEADLETTER_EXPIRY_WARNING = None
    park_aged("mail", days_ago=29, seq=1)
    assert expiry.warn_expiring() == 0
    assert received == []


def test_each_message_within_the_horizon_is_warned_once(received, caplog) -> None:
    soon = park_aged("mail", days_ago=28, seq=1)
    park_aged("mail", days_ago=10, seq=2)
    other = park_aged("hooks", days_ago=29.9, seq=1)
    with caplog.at_level(logging.WARNING, logger="deadletter"):
        assert expiry.warn_expiring() == 2
    assert {(r["sender"], r["key"]) for r in received} == {("mail", soon), ("hooks", other)}
    [mail] = [r for r in received if r["sender"] == "mail"]
    assert mail["msg"].subject == "m1"
    assert "message about to expire queue=mail" in caplog.text
    assert expiry.warn_expiring() == 0  # a second run does not warn again
    assert len(received) == 2


def test_the_expiry_time_is_first_failure_plus_the_age_limit(received) -> None:
    key = park_aged("mail", days_ago=28, seq=1)
    expiry.warn_expiring()
    [warning] = received
    [item] = [q for q in queue.fetch_failed_msgs("mail") if q.key == key]
    expected = item.msg.queued_at + timedelta(days=30)
    assert abs((warning["expires_at"] - expected).total_seconds()) < 1e-3


def test_warnings_of_rows_gone_are_forgotten(received) -> None:
    key = park_aged("mail", days_ago=28, seq=1)
    expiry.warn_expiring()
    assert ExpiryWarning.objects.count() == 1
    queue.dequeue(key)
    expiry.warn_expiring()
    assert ExpiryWarning.objects.count() == 0


def test_only_the_chosen_queues(received) -> None:
    park_aged("mail", days_ago=28, seq=1)
    park_aged("hooks", days_ago=28, seq=1)
    assert expiry.warn_expiring(["hooks"]) == 1
    assert [r["sender"] for r in received] == ["hooks"]


def test_only_queues_with_a_message_that_old_are_read_however_many_queues_there_are(
    received,
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.reports.many_queues import park_one_row_queues

    def warned() -> tuple[int, int]:
        with CaptureQueriesContext(connection) as ctx:
            n = expiry.warn_expiring()
        return len(ctx.captured_queries), n

    park_aged("mail", days_ago=28, seq=1)
    park_one_row_queues(20)
    assert warned()[1] == 1
    queries, _ = warned()
    park_one_row_queues(3000, prefix="spam-x")
    assert warned() == (queries, 0)
