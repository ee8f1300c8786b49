"""A claim locks the oldest row no other transaction holds, within the bounds asked."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from deadletter.queue.claims import claim_failed_msg
from tests.drain.drain_harness import claim_held_by_another_thread
from tests.factories import park

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor == "sqlite", reason="SELECT ... FOR UPDATE needs row locks"
    ),
]


def test_a_claim_skips_the_row_another_transaction_holds() -> None:
    first, second = park("first", "second")
    with claim_held_by_another_thread("q") as held, transaction.atomic():
        assert held == first
        got = claim_failed_msg("q")
        assert got is not None and (got.key, got.msg.subject) == (second, "second")
        assert claim_failed_msg("q", after=second) is None


def test_a_claim_starts_after_a_key_and_stops_at_until() -> None:
    first, second, third = park("first", "second", "third")
    with transaction.atomic():
        assert claim_failed_msg("q", after=first).key == second
        assert claim_failed_msg("q", after=second, until=second) is None
        assert claim_failed_msg("q", after=second, until=third).key == third


def test_a_claim_is_one_statement_django_sees(django_assert_num_queries) -> None:
    park("first")
    with transaction.atomic(), django_assert_num_queries(1) as captured:
        assert claim_failed_msg("q") is not None
    assert "SKIP LOCKED" in captured.captured_queries[0]["sql"]
