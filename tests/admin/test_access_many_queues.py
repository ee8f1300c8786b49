"""A rule whose pattern is not a prefix and matches 10,000 queues (issue 44): every
page and API list of a user it restricts answers 200 with exactly their rows, and
no statement grows with the number of queues it matches (SQLite refused one
with "Expression tree is too large"; the servers took tens of seconds)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from deadletter.models import QueueAccess, QueuedMessage
from deadletter.queue.archive import discard
from deadletter.wire import codec, keys
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/deadletter/queuedmessage/"
ARCHIVE = "/admin/deadletter/archivedmessage/"
API = "/api/deadletter"
MATCHED = int(os.environ.get("MANY_QUEUES", "10000"))
# The longest statement a page may send: what grows with a page's size (the
# overview's figures of 50 queues, some 80,000 characters), never with the queues
# a rule matches (one key range each: 10,000 ranges are some 750,000 characters).
LONGEST_STATEMENT = 250_000


def billing(i: int) -> str:
    return f"t{i:05d}-billing"


def other(i: int) -> str:
    return f"t{i:05d}-mail"


@pytest.fixture
def many() -> dict[str, bytes]:
    """10,000 queues `*-billing` and 10,000 others between them, one row each; the
    row's key by queue."""
    value = codec.encode_one(Message(subject="parcel lost", queued_at=GoTime.now()))
    names = [name for i in range(MATCHED) for name in (billing(i), other(i))]
    rows = [QueuedMessage(key=keys.new_key(name), value=value) for name in names]
    QueuedMessage.objects.bulk_create(rows, batch_size=500)
    return {keys.queue_of(bytes(row.key)): bytes(row.key) for row in rows}


@pytest.fixture
def bob(db: Any) -> Client:
    """A staff user whose group's rule `*-billing` grants view, retry and delete, with
    every permission of the app; another team's rule beside it."""
    user = User.objects.create_user("bob", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="deadletter"))
    team = Group.objects.create(name="billing")
    user.groups.add(team)
    QueueAccess.objects.create(group=team, queues="*-billing", retry=True, delete=True)
    QueueAccess.objects.create(group=Group.objects.create(name="mail"), queues="*-mail")
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def statements() -> Iterator[CaptureQueriesContext]:
    with CaptureQueriesContext(connection) as ctx:
        yield ctx


def queues_on(text: str) -> set[str]:
    """The queues named in a page's table of results (not its filters)."""
    table = text.split("<tbody>", 1)[-1].split("</tbody>", 1)[0] if "<tbody>" in text else ""
    return set(re.findall(r"\bt\d{5}-(?:billing|mail)\b", table))


def bounded(ctx: CaptureQueriesContext) -> None:
    longest = max(ctx.captured_queries, key=lambda q: len(q["sql"]), default={"sql": ""})
    assert len(longest["sql"]) < LONGEST_STATEMENT, longest["sql"][:600]


def get(client: Client, url: str, **params: str) -> str:
    response = client.get(url, params)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode()


def test_the_admin_pages_hold_the_matched_queues_only(
    bob: Client, many: dict[str, bytes], statements: CaptureQueriesContext
) -> None:
    first = get(bob, CHANGELIST)
    seen = queues_on(first)
    assert len(seen) == 50 and all(name.endswith("-billing") for name in seen)
    assert billing(0) in seen
    after = many[billing(49)].hex()
    second = queues_on(get(bob, CHANGELIST, after=after))
    assert second == {billing(i) for i in range(50, 100)}
    assert queues_on(get(bob, CHANGELIST, queue=billing(MATCHED - 1))) >= {billing(MATCHED - 1)}
    assert queues_on(get(bob, CHANGELIST, queue=other(MATCHED - 1))) == set()
    searched = queues_on(get(bob, CHANGELIST, q="parcel"))
    assert len(searched) == 50 and all(name.endswith("-billing") for name in searched)
    overview = get(bob, f"{CHANGELIST}overview/")
    listed = queues_on(overview)
    assert listed and all(name.endswith("-billing") for name in listed)
    assert f"The queues you may see: {MATCHED:,} row(s)" in overview
    bounded(statements)


def test_the_archive_holds_the_matched_queues_entries_only(
    bob: Client, many: dict[str, bytes], statements: CaptureQueriesContext
) -> None:
    for i in range(0, 300, 3):
        discard(many[billing(i)], actor="root")
        discard(many[other(i)], actor="root")
    page = queues_on(get(bob, ARCHIVE))
    assert page and all(name.endswith("-billing") for name in page)
    assert billing(297) in page
    answer = bob.get(f"{API}/archive/")
    assert answer.status_code == 200
    names = {entry["queue"] for entry in answer.json()["results"]}
    assert names and all(name.endswith("-billing") for name in names)
    bounded(statements)


def test_the_api_lists_hold_the_matched_queues_only(
    bob: Client, many: dict[str, bytes], statements: CaptureQueriesContext
) -> None:
    queues = bob.get(f"{API}/queues/", {"limit": "100"})
    assert queues.status_code == 200
    assert [q["name"] for q in queues.json()] == [billing(i) for i in range(100)]
    rows = bob.get(f"{API}/messages/", {"limit": "100"})
    assert rows.status_code == 200
    found = [keys.queue_of(keys.from_text(r["key"])) for r in rows.json()["results"]]
    assert found == [billing(i) for i in range(100)]
    searched = bob.get(f"{API}/messages/", {"q": "parcel", "limit": "100"})
    assert searched.status_code == 200
    found = [keys.queue_of(keys.from_text(r["key"])) for r in searched.json()["results"]]
    assert found == [billing(i) for i in range(100)]
    last = bob.get(f"{API}/messages/", {"after": many[billing(MATCHED - 2)].hex(), "limit": "5"})
    tail = [keys.queue_of(keys.from_text(r["key"])) for r in last.json()["results"]]
    assert tail == [billing(MATCHED - 1)] and last.json()["next"] is None
    bounded(statements)
