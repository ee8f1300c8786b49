"""queue.browse: operators read rows as they are, a key range at a time, writing nothing."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from deadletter.models import QueuedMessage
from deadletter.queue import browse, store_failed_msgs
from deadletter.queue.api import queue_names
from deadletter.wire import keys
from deadletter.wire.messages import Message

pytestmark = pytest.mark.django_db


def test_page_rows_continues_after_the_given_key() -> None:
    stored = [store_failed_msgs("q", Message(subject=str(i))) for i in range(4)]
    page = browse.page_rows("q", after=stored[1], limit=10)
    assert [row.key for row in page] == stored[2:]


def test_page_rows_shows_a_legacy_row_first_and_leaves_it_in_place() -> None:
    store_failed_msgs("q", Message(subject="per-message"))
    QueuedMessage.objects.create(key=b"q", value=b"\x80")
    page = browse.page_rows("q")
    assert page[0].is_legacy
    assert QueuedMessage.objects.filter(key=b"q").exists()


def test_page_rows_refuses_a_limit_out_of_range() -> None:
    with pytest.raises(ValueError, match="limit"):
        browse.page_rows("q", limit=browse.MAX_PAGE + 1)


def test_expired_keys_are_the_rows_parked_before_the_age_cutoff(settings) -> None:
    settings.DEADLETTER_MAX_QUEUE_AGE = timedelta(days=1)
    now = time.time_ns()
    old = keys.make_key("q", now - 2 * 86_400 * 10**9, 1)
    QueuedMessage.objects.create(key=old, value=b"\xa0")
    store_failed_msgs("q", Message(subject="fresh"))
    assert browse.expired_keys("q") == [old]


def test_queue_names_lists_every_queue_once_in_key_order_in_one_statement(
    django_assert_num_queries,
) -> None:
    for name in ("a", "a-b", "ab", "b", "ž-queue"):
        store_failed_msgs(name, Message(subject=name))
    QueuedMessage.objects.create(key=b"c", value=b"\x80")  # a legacy row alone
    QueuedMessage.objects.create(key=b"a", value=b"\x80")  # a legacy row before messages
    QueuedMessage.objects.create(key=b"d-no-separator-" + bytes(20), value=b"\xa0")
    with django_assert_num_queries(1):
        names = queue_names()
    assert names == ["a", "a-b", "ab", "b", "c", "d-no-separator-", "ž-queue"]
