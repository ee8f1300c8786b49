"""Which parked queues no handler takes, and which names are no queue at all."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import CommandError

from deadletter.management.queues import SHOWN, require_known_queues, unhandled_queues
from tests.factories import park

pytestmark = pytest.mark.django_db(transaction=True)


def test_handled_queues_are_skipped_wherever_they_sort() -> None:
    for name in ("a-handled", "b-orphan", "c-handled", "d-orphan"):
        park("x", queue=name)
    found = unhandled_queues(["a-handled", "c-handled"])
    assert (found.counts, found.more) == ([("b-orphan", 1), ("d-orphan", 1)], False)


def test_only_the_first_ones_are_named_and_the_rest_said_to_exist() -> None:
    for i in range(SHOWN + 5):
        park("x", queue=f"orphan-{i:02d}")
    found = unhandled_queues([])
    assert [name for name, _ in found.counts] == [f"orphan-{i:02d}" for i in range(SHOWN)]
    assert found.more
    assert str(found).endswith(" and more")


def test_the_names_cost_a_seek_a_queue_shown_whatever_the_number_of_queues(
    django_assert_max_num_queries: Any,
) -> None:
    for i in range(200):
        park("x", queue=f"orphan-{i:03d}")
    with django_assert_max_num_queries(2 * SHOWN + 4):
        found = unhandled_queues(["q"])
    assert len(found.counts) == SHOWN


def test_a_name_with_no_row_and_no_handler_is_refused_with_exit_status_two(
    settings: Any,
) -> None:
    settings.DEADLETTER_HANDLERS = {"configured": "tests.factories.ok_handler"}
    park("x", queue="parked")
    require_known_queues(["configured", "parked"])
    with pytest.raises(CommandError, match="no queue 'nope'") as raised:
        require_known_queues(["parked", "nope"])
    assert raised.value.returncode == 2
