"""Each queue's archived count in the stats (`deadletter_stats`) and the admin's
overview, whose count links to the archive's list filtered by the queue."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command

from deadletter.queue import archive
from deadletter.reports import overview, stats
from tests.admin.test_admin import open_page
from tests.factories import park, park_aged, parked

pytestmark = pytest.mark.django_db

OVERVIEW = "/admin/deadletter/queuedmessage/overview/"


def archive_some() -> None:
    """Queue a: two archived (a discard, an expiry), one live; b: one archived, nothing live."""
    first, _live = park("gone", "live", queue="a")
    archive.discard(first, "alice")
    park_aged("a", 31, seq=9)
    parked("a")
    (only,) = park("only", queue="b")
    archive.discard(only, "alice")


def test_stats_count_each_queues_archive_entries() -> None:
    archive_some()
    figures = stats.collect()
    assert {q.name: q.archived for q in figures.queues} == {"a": 2, "b": 1}
    assert figures.totals.archived == 3
    listed = stats.collect(limit=1000)
    assert {q.name: q.archived for q in listed.queues} == {"a": 2, "b": 1}
    capped = stats.collect(limit=1)
    assert {q.name: q.archived for q in capped.queues} == {"a": 2}
    assert capped.others is not None and capped.others.archived == 1


def test_deadletter_stats_shows_the_archived_count() -> None:
    archive_some()
    out = io.StringIO()
    call_command("deadletter_stats", "--format", "json", "--limit", "all", stdout=out)
    shown = {q["queue"]: q["archived"] for q in json.loads(out.getvalue())["queues"]}
    assert shown == {"a": 2, "b": 1}
    out = io.StringIO()
    call_command("deadletter_stats", "--queue", "a", stdout=out)
    head, row = out.getvalue().splitlines()[:2]
    end = head.index(" archived") + len(" archived")
    assert row[:end].split()[-1] == "2"  # right-aligned under its heading


def test_the_overview_counts_a_queues_archive_in_its_one_statement() -> None:
    archive_some()
    (a,) = overview.overview(["a"])
    assert str(a.archived) == "2"


def test_a_queues_own_max_age_decides_what_the_overview_calls_expired(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {
        "short": {"handler": "tests.factories.ok_handler", "max_age": timedelta(days=2)}
    }
    park_aged("short", 3)
    park_aged("q", 3)
    short, q = overview.overview(["short", "q"])
    assert (short.expired.rows, q.expired.rows) == (1, 0)


def test_the_overviews_archived_count_links_to_the_archive_of_that_queue(admin_client) -> None:
    archive_some()
    page = open_page(admin_client, OVERVIEW)
    assert "archived" in page.headers
    archive_page = open_page(admin_client, page.link("2"))
    assert archive_page.url.endswith("/admin/deadletter/archivedmessage/?queue=a")
    assert "gone" in archive_page.text and "only" not in archive_page.text
