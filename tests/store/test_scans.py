"""store.scans: the loose index walk over queues, from a bound either way."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from deadletter.models import QueuedMessage
from deadletter.store import scans, sql
from deadletter.wire import keys
from tests.reports.many_queues import park_one_row_queues

pytestmark = pytest.mark.django_db


def three_two_row_queues() -> list[bytes]:
    made = [keys.make_key(name, t, 0) for name in ("a", "b", "c") for t in (1, 2)]
    QueuedMessage.objects.bulk_create([QueuedMessage(key=k, value=b"\x80") for k in made])
    return made


def test_queue_keys_upward_are_each_queues_lowest_key_from_the_bound() -> None:
    made = three_two_row_queues()
    c = sql.connection()
    assert scans.queue_keys(c, None, descending=False, limit=10) == made[0::2]
    assert scans.queue_keys(c, b"a\x01", descending=False, limit=10) == made[2::2]
    assert scans.queue_keys(c, b"b", descending=False, limit=1) == [made[2]]


def test_queue_keys_downward_are_each_queues_highest_key_below_the_bound() -> None:
    made = three_two_row_queues()
    c = sql.connection()
    assert scans.queue_keys(c, None, descending=True, limit=10) == made[5::-2]
    assert scans.queue_keys(c, b"c", descending=True, limit=10) == [made[3], made[1]]
    assert scans.queue_keys(c, b"c", descending=True, limit=1) == [made[3]]


def test_queue_keys_see_a_legacy_row_as_its_queue() -> None:
    made = three_two_row_queues()
    QueuedMessage.objects.create(key=b"b", value=b"\x80")
    c = sql.connection()
    assert scans.queue_keys(c, b"a\x01", descending=False, limit=1) == [b"b"]
    assert scans.queue_keys(c, b"c", descending=True, limit=10) == [made[3], made[1]]


def test_queue_keys_are_one_statement_however_many_queues_there_are() -> None:
    park_one_row_queues(3000)
    with CaptureQueriesContext(connection) as ctx:
        found = scans.queue_keys(sql.connection(), b"spam-02000", descending=True, limit=5)
    assert [keys.queue_of(k) for k in found] == [f"spam-{i:05d}" for i in range(1999, 1994, -1)]
    assert len(ctx.captured_queries) == 1


def test_queue_heads_are_the_unbounded_upward_walk() -> None:
    made = three_two_row_queues()
    assert scans.queue_heads(sql.connection()) == made[0::2]
