"""queue.archive_pages for a user kept to some queues: an unfiltered page is a merge
of the granted queues' index ranges, full whenever that many granted entries follow
the cursor; past `MERGED_QUEUES` queues the database filters the time index by the
granted ranges instead, and both give the same pages."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from deadletter.models import ArchivedMessage
from deadletter.queue import archive_pages
from deadletter.queue.access import Scope
from deadletter.queue.archive import discard
from deadletter.queue.archive_pages import Filters
from tests.factories import park

pytestmark = pytest.mark.django_db

QUEUES = ["a", "billing.cards", "billing.refunds", "billingx", "mail", "support"]
GRANTED = ("billing.cards", "billing.refunds", "mail")


def kept_to(*patterns: str) -> Scope:
    return Scope([(pattern, ["view"]) for pattern in patterns], unrestricted=False)


def archived(n: int, queues: list[str]) -> None:
    """`n` entries, the queues taken in an uneven turn; one in four deleted by carol."""
    for i in range(n):
        key = park(f"m{i}", queue=queues[i * 5 % len(queues)])[0]
        discard(key, actor="carol" if i % 4 == 0 else "root")


def walk(filters: Filters, size: int) -> list[list[int]]:
    """The ids of every page, following `next` from the newest."""
    pages: list[list[int]] = []
    cursor = None
    while True:
        found = archive_pages.page(filters, cursor, size)
        pages.append([entry.id for entry in found.entries])
        if found.next is None:
            return pages
        cursor = found.next


def granted_newest_first(**columns: str) -> list[int]:
    rows = ArchivedMessage.objects.filter(queue__in=GRANTED, **columns)
    return list(rows.order_by("-archived_at", "-id").values_list("id", flat=True))


@pytest.mark.parametrize("size", [1, 4, 50])
def test_the_merge_and_the_databases_filter_give_the_same_full_pages(
    size: int, monkeypatch: Any
) -> None:
    archived(40, QUEUES)
    within = Filters(within=kept_to("billing.*", "mail"))
    merged = walk(within, size)
    monkeypatch.setattr(archive_pages, "MERGED_QUEUES", 2)
    assert walk(within, size) == merged
    assert [ident for page in merged for ident in page] == granted_newest_first()
    assert all(len(page) == size for page in merged[:-1]) and merged[-1]


@pytest.mark.parametrize("size", [1, 4])
def test_a_filtered_page_looks_through_granted_entries_only_both_ways(
    size: int, monkeypatch: Any
) -> None:
    """The merge shares the window among the queues, the database's filter takes the
    newest granted entries: the windows differ, what they find does not."""
    monkeypatch.setattr(archive_pages, "WINDOW", 5)
    archived(40, QUEUES)
    carol = Filters(within=kept_to("billing.*", "mail"), actor="carol")
    expected = granted_newest_first(actor="carol")
    assert expected
    for merged in (50, 2):
        monkeypatch.setattr(archive_pages, "MERGED_QUEUES", merged)
        assert [ident for page in walk(carol, size) for ident in page] == expected


def test_a_filtered_page_that_stops_says_how_many_granted_entries_it_looked_through(
    monkeypatch: Any,
) -> None:
    """Each of the two granted queues looks through its next three entries, back to
    the newer of the places where they stop: five of theirs, none of support's."""
    monkeypatch.setattr(archive_pages, "WINDOW", 6)
    archived(30, ["mail", "support", "billing.cards"])
    found = archive_pages.page(Filters(within=kept_to("billing.*", "mail"), reason="expired"))
    assert (found.entries, found.stopped, found.looked) == ([], True, 5)
    newest = granted_newest_first()
    assert found.next is not None and found.next.id == newest[4]
    rest = archive_pages.page(
        Filters(within=kept_to("billing.*", "mail"), reason="expired"), found.next
    )
    assert rest.next is not None and rest.next.id < found.next.id


def test_a_granted_queue_behind_many_others_is_the_first_page() -> None:
    archived(3, ["mail"])
    archived(60, ["support", "a"])
    found = archive_pages.page(Filters(within=kept_to("mail")), None, 2)
    assert [entry.queue for entry in found.entries] == ["mail", "mail"]
    last = archive_pages.page(Filters(within=kept_to("mail")), found.next, 2)
    assert len(last.entries) == 1 and last.next is None


def test_nothing_granted_is_an_empty_last_page() -> None:
    archived(5, QUEUES)
    found = archive_pages.page(Filters(within=kept_to("nothing.*")), None, 50)
    assert (found.entries, found.next) == ([], None)


def test_a_merged_page_asks_the_same_statements_however_many_other_entries() -> None:
    archived(8, QUEUES)

    def statements() -> int:
        with CaptureQueriesContext(connection) as ctx:
            archive_pages.page(Filters(within=kept_to("billing.*", "mail")), None, 2)
        return len(ctx.captured_queries)

    few = statements()
    archived(100, ["a", "support", "billingx"])
    assert statements() == few
