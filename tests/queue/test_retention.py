"""Retention: a purge removes only the entries older than their queue's
`archive_for`, in bounded batches; `timedelta(0)` turns the archive off and every
path then writes exactly what it wrote before the archive existed."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from deadletter.models import ArchivedMessage, Attempt
from deadletter.queue import archive, remove_msg, settlements
from deadletter.queue.archive_retention import archived_counts, due_for_purge, purge
from deadletter.store.counters import drop_counts
from deadletter.wire import codec
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message
from tests.factories import insert, park, park_aged, parked, table_rows

pytestmark = pytest.mark.django_db

OK = "tests.factories.ok_handler"


def archived_days_ago(queue: str, *subjects: str, days: float) -> list[bytes]:
    """Messages of `queue` parked and discarded, their entries made `days` old."""
    keys = park(*subjects, queue=queue)
    for key in keys:
        archive.discard(key, "tester")
    ArchivedMessage.objects.filter(key__in=keys).update(
        archived_at=datetime.now(UTC) - timedelta(days=days)
    )
    return keys


def entry_subjects() -> list[str]:
    return [e.msg.subject for e in archive.archived_msgs() if e.msg]


def test_purge_removes_only_what_is_older_than_its_queues_archive_for(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {
        "short": {"handler": OK, "archive_for": timedelta(days=1)},
        "long": {"handler": OK, "archive_for": timedelta(days=10)},
        "forever": {"handler": OK, "archive_for": None},
    }
    archived_days_ago("short", "short-old", days=2)
    archived_days_ago("short", "short-new", days=0.5)
    archived_days_ago("long", "long-old", days=11)
    archived_days_ago("long", "long-mid", days=2)
    archived_days_ago("forever", "forever-old", days=4000)
    archived_days_ago("q", "default-old", days=31)
    archived_days_ago("q", "default-new", days=29)
    assert due_for_purge() == {"short": 1, "long": 1, "q": 1}
    assert purge() == 3
    assert sorted(entry_subjects()) == [
        "default-new",
        "forever-old",
        "long-mid",
        "short-new",
    ]
    assert archived_counts() == {"forever": 1, "long": 1, "q": 1, "short": 1}


def test_a_global_archive_for_of_none_keeps_for_ever(settings: Any) -> None:
    settings.DEADLETTER_ARCHIVE_FOR = None
    archived_days_ago("q", "ancient", days=10_000)
    assert purge() == 0
    assert entry_subjects() == ["ancient"]


def test_purge_works_in_batches_and_stops_at_its_deadline() -> None:
    archived_days_ago("q", *(f"m{i}" for i in range(5)), days=40)
    assert purge(deadline=time.monotonic() - 1) == 0
    assert purge(batch=2, queue="other") == 0
    assert purge(batch=2) == 5
    assert entry_subjects() == []


def test_purge_takes_the_attempts_of_keys_nothing_else_holds(settings: Any) -> None:
    gone, kept_live = archived_days_ago("q", "gone", "kept-live", days=40)
    now = datetime.now(UTC)
    for key in (gone, kept_live):
        Attempt.objects.create(key=key, at=now, outcome="failed", error="E: x")
    insert(kept_live, codec.encode_one(Message(subject="edited", queued_at=GoTime.now())))
    assert purge() == 2
    assert list(Attempt.objects.values_list("key", flat=True)) == [kept_live]


def test_archived_counts_of_given_queues_include_those_with_none() -> None:
    archived_days_ago("a", "x", "y", days=0)
    assert archived_counts(["a", "b"]) == {"a": 2, "b": 0}
    assert archived_counts([]) == {}


# --- the archive off ---------------------------------------------------------------


def statements(run: Any) -> list[str]:
    """The statements `run` sends, their values and savepoint names masked."""
    with CaptureQueriesContext(connection) as captured:
        run()
    return [_VALUES.sub("?", q["sql"]) for q in captured.captured_queries]


_VALUES = re.compile(
    r"X'[0-9A-F]*'|(?:_binary ?)?'(?:[^'\\]|\\.|'')*'(?:::\w+)?|[\"`]s\d+_x\d+[\"`]|\b\d+\b"
)


ARCHIVE_TABLE = ArchivedMessage._meta.db_table


def test_an_expired_drop_with_the_archive_off_writes_what_it_wrote_before(settings: Any) -> None:
    park_aged("on", 31, seq=1)
    on = statements(lambda: parked("on"))
    settings.DEADLETTER_ARCHIVE_FOR = timedelta(0)
    park_aged("off", 31, seq=1)
    off = statements(lambda: parked("off"))
    assert [s for s in on if ARCHIVE_TABLE not in s] == off
    assert len(on) == len(off) + 1
    assert table_rows() == []
    assert [e.queue for e in archive.archived_msgs()] == ["on"]
    assert drop_counts(connection)["off"] == drop_counts(connection)["on"]


def test_an_operators_delete_with_the_archive_off_is_remove_msg(settings: Any) -> None:
    settings.DEADLETTER_ARCHIVE_FOR = timedelta(0)
    first, second = park("a", "b")
    before = statements(lambda: remove_msg(first))
    after = statements(lambda: archive.discard(second, "alice"))
    assert before == after
    assert table_rows() == [] and not ArchivedMessage.objects.exists()
    assert archive.discard_many(park("c", "d"), "alice") == 2
    assert table_rows() == [] and not ArchivedMessage.objects.exists()


def test_a_handlers_drop_with_the_archive_off_writes_no_entry(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"off": {"handler": OK, "archive_for": timedelta(0)}}
    (key,) = park("x", queue="off")
    (other,) = park("y")
    msg = Message(subject="x")
    off = statements(lambda: settlements.drop_msg(key, msg, "max_attempts"))
    on = statements(lambda: settlements.drop_msg(other, msg, "max_attempts"))
    assert [s for s in on if ARCHIVE_TABLE not in s] == off
    assert len(on) == len(off) + 1
    assert [e.queue for e in archive.archived_msgs()] == ["q"]
    assert drop_counts(connection)["off"]["max_attempts"] == 1


def test_a_queue_whose_archive_is_off_keeps_none_of_its_old_entries(settings: Any) -> None:
    archived_days_ago("q", "kept-before", days=0)
    settings.DEADLETTER_ARCHIVE_FOR = timedelta(0)
    assert purge() == 1
    assert entry_subjects() == []
