from __future__ import annotations

import pytest

from deadletter import inspection, keys
from deadletter.messages import Message
from deadletter.models import QueuedMessage
from deadletter.queue import store_failed_msgs
from deadletter.urls import KeyConverter

pytestmark = pytest.mark.django_db


def test_page_rows_continues_after_the_given_key() -> None:
    stored = [store_failed_msgs("q", Message(subject=str(i))) for i in range(4)]
    page = inspection.page_rows("q", after=stored[1], limit=10)
    assert [row.key for row in page] == stored[2:]


def test_page_rows_shows_a_legacy_row_first_and_leaves_it_in_place() -> None:
    store_failed_msgs("q", Message(subject="per-message"))
    QueuedMessage.objects.create(key=b"q", value=b"\x80")
    page = inspection.page_rows("q")
    assert page[0].is_legacy
    assert QueuedMessage.objects.filter(key=b"q").exists()


def test_page_rows_refuses_a_limit_out_of_range() -> None:
    with pytest.raises(ValueError, match="limit"):
        inspection.page_rows("q", limit=inspection.MAX_PAGE + 1)


def test_summary_of_an_empty_queue_has_no_age() -> None:
    assert inspection.summarize("empty") == inspection.QueueSummary("empty", 0, None, None)


def test_key_converter_round_trips_hex() -> None:
    key = keys.new_key("q")
    converter = KeyConverter()
    assert converter.to_python(converter.to_url(key)) == key


def test_key_converter_refuses_odd_length_hex() -> None:
    with pytest.raises(ValueError, match="not a key"):
        KeyConverter().to_python("abc")
