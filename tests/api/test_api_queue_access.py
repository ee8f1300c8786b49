"""Per-queue access over the API: a billing-team user (a group granted `billing.*`
view, retry and delete, with the model permissions) sees and acts on billing's
queues only; another team's queue, message, archive entry or redrive answers
exactly as a missing one does (404), never a 403 that confirms it; superusers,
and a project with no `QueueAccess` row, are as before."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from rest_framework.test import APIClient

from deadletter.api.base import handle_exception
from deadletter.exceptions import DeadletterError
from deadletter.models import ArchivedMessage, QueueAccess, QueuedMessage, Redrive
from deadletter.queue import access, archive_pages
from deadletter.queue.archive import discard
from tests.factories import park

pytestmark = pytest.mark.django_db(transaction=True)

API = "/api/deadletter"
PERMISSIONS = [
    "view_queuedmessage",
    "add_queuedmessage",
    "change_queuedmessage",
    "delete_queuedmessage",
    "drain_queuedmessage",
    "redrive_queuedmessage",
    "view_archivedmessage",
    "restore_archivedmessage",
    "view_redrive",
]
QUEUES = ("a-first", "billing.invoices", "billing.refunds", "billingx", "support.tickets")


@pytest.fixture(autouse=True)
def handlers(settings: Any) -> None:
    policy = {"handler": "tests.factories.ok_handler", "editable": True}
    settings.DEADLETTER_HANDLERS = dict.fromkeys(QUEUES, policy)


@pytest.fixture
def billing() -> APIClient:
    """A client of a user in the billing group, with every model permission."""
    group = Group.objects.create(name="billing")
    QueueAccess.objects.create(group=group, queues="billing.*", retry=True, delete=True)
    QueueAccess.objects.create(group=Group.objects.create(name="support"), queues="support.*")
    user = User.objects.create_user("bill")
    user.groups.add(group)
    user.user_permissions.set(Permission.objects.filter(codename__in=PERMISSIONS))
    client = APIClient()
    client.force_login(user)
    return client


@pytest.fixture
def rows() -> dict[str, bytes]:
    """One message in each queue, by queue."""
    return {queue: park(f"{queue} failed", queue=queue)[0] for queue in QUEUES}


def message(key: bytes) -> str:
    return f"{API}/messages/{key.hex()}/"


def missing(queue: str) -> bytes:
    """A key of `queue` that no row has."""
    return queue.encode() + b"\x00" + b"\x00" * 15 + b"\x01"


def names(response: Any) -> list[str]:
    assert response.status_code == 200, response.content
    return [queue["name"] for queue in response.json()]


def queues_of(response: Any) -> list[str]:
    assert response.status_code == 200, response.content
    return [row["queue"] for row in response.json()["results"]]


def test_the_queue_list_holds_the_granted_queues_only_and_pages_them(billing, rows) -> None:
    assert names(billing.get(f"{API}/queues/")) == ["billing.invoices", "billing.refunds"]
    first = billing.get(f"{API}/queues/", {"limit": 1})
    assert names(first) == ["billing.invoices"]
    link = first["Link"]
    last = billing.get(link[1 : link.index(">")])
    assert names(last) == ["billing.refunds"] and "Link" not in last


def test_another_teams_queue_answers_as_a_queue_that_does_not_exist(billing, rows) -> None:
    for suffix in ("", "messages/"):
        hidden = billing.get(f"{API}/queues/support.tickets/{suffix}")
        absent = billing.get(f"{API}/queues/support.nothing/{suffix}")
        assert hidden.status_code == absent.status_code == 404
        assert hidden.json() == absent.json()
        assert "support" not in str(hidden.json())
        assert billing.get(f"{API}/queues/billing.invoices/{suffix}").status_code == 200
    assert queues_of(billing.get(f"{API}/queues/billing.invoices/messages/")) == [
        "billing.invoices"
    ]


def test_another_teams_message_is_404_for_get_delete_and_patch(billing, rows) -> None:
    support = rows["support.tickets"]
    for method in ("get", "delete", "patch"):
        hidden = getattr(billing, method)(message(support), {"subject": "x"}, format="json")
        absent = getattr(billing, method)(message(missing("support.tickets")), format="json")
        assert (method, hidden.status_code) == (method, 404)
        assert hidden.json() == absent.json()
    assert QueuedMessage.objects.filter(key=support).exists()
    assert ArchivedMessage.objects.count() == 0


def test_a_granted_message_reads_and_deletes_but_an_edit_needs_the_edit_grant(
    billing, rows
) -> None:
    key = rows["billing.invoices"]
    read = billing.get(message(key))
    assert read.status_code == 200
    refused = billing.patch(
        message(key), {"subject": "x"}, format="json", HTTP_IF_MATCH=read["ETag"]
    )
    assert refused.status_code == 403
    assert "edit" in refused.json()["detail"]
    assert billing.delete(message(key)).status_code == 204
    assert ArchivedMessage.objects.get().actor == "bill"


def test_a_drain_of_another_teams_queue_is_404(billing, rows) -> None:
    assert billing.post(f"{API}/queues/support.tickets/drain/").status_code == 404
    assert QueuedMessage.objects.filter(key=rows["support.tickets"]).exists()
    drained = billing.post(f"{API}/queues/billing.invoices/drain/")
    assert drained.status_code == 200, drained.content
    assert not QueuedMessage.objects.filter(key=rows["billing.invoices"]).exists()


def test_the_search_across_queues_holds_the_granted_queues_only(billing, rows) -> None:
    everything = billing.get(f"{API}/messages/")
    assert queues_of(everything) == ["billing.invoices", "billing.refunds"]
    assert queues_of(billing.get(f"{API}/messages/", {"q": "failed"})) == [
        "billing.invoices",
        "billing.refunds",
    ]
    first = billing.get(f"{API}/messages/", {"q": "failed", "limit": 1}).json()
    assert [row["queue"] for row in first["results"]] == ["billing.invoices"]
    rest = billing.get(first["next"]).json()
    assert [row["queue"] for row in rest["results"]] == ["billing.refunds"]
    assert rest["next"] is None


def test_the_search_pages_within_and_across_granted_queues(billing) -> None:
    park("one", "two", "three", queue="billing.invoices")
    park("four", queue="billing.refunds")
    park("hidden", queue="billingx")
    park("five", "six", queue="c.one")
    QueueAccess.objects.create(group=Group.objects.get(name="billing"), queues="c.*")
    seen: list[str] = []
    page = billing.get(f"{API}/messages/", {"limit": 2}).json()
    while True:
        seen += [row["messages"][0]["subject"] for row in page["results"]]
        if page["next"] is None:
            break
        page = billing.get(page["next"]).json()
    assert seen == ["one", "two", "three", "four", "five", "six"]


def test_the_archive_holds_the_granted_queues_entries_only(billing, rows, api) -> None:
    for queue in ("support.tickets", "billing.invoices", "a-first"):
        assert api.delete(message(rows[queue])).status_code == 204
    listed = billing.get(f"{API}/archive/")
    assert queues_of(listed) == ["billing.invoices"]
    assert queues_of(billing.get(f"{API}/archive/", {"queue": "support.tickets"})) == []
    assert queues_of(billing.get(f"{API}/archive/", {"limit": 1})) == ["billing.invoices"]
    assert len(queues_of(api.get(f"{API}/archive/"))) == 3


def test_another_teams_archive_entry_is_404_to_read_and_restore(billing, rows, api) -> None:
    support, mine = rows["support.tickets"], rows["billing.invoices"]
    for key in (support, mine):
        assert api.delete(message(key)).status_code == 204
    absent = missing("support.tickets").hex()
    for path in ("", "restore/"):
        method = billing.post if path else billing.get
        hidden = method(f"{API}/archive/{support.hex()}/{path}")
        assert hidden.status_code == 404
        assert hidden.json() == method(f"{API}/archive/{absent}/{path}").json()
    assert not QueuedMessage.objects.filter(key=support).exists()
    assert billing.get(f"{API}/archive/{mine.hex()}/").status_code == 200
    restored = billing.post(f"{API}/archive/{mine.hex()}/restore/")
    assert restored.status_code == 201, restored.content
    assert QueuedMessage.objects.filter(key=mine).exists()


def test_a_live_message_of_another_team_is_not_confirmed_by_a_restore(billing, rows) -> None:
    answer = billing.post(f"{API}/archive/{rows['support.tickets'].hex()}/restore/")
    assert answer.status_code == 404


def test_a_redrive_of_a_queue_without_the_redrive_grant_is_a_400_naming_no_queue(
    billing, rows
) -> None:
    for queue in ("support.tickets", "support.nothing", "billing.invoices"):
        refused = billing.post(f"{API}/redrives/", {"queue": queue}, format="json")
        assert refused.status_code == 400
        assert list(refused.json()) == ["queue"]
        assert queue not in str(refused.json())
    assert Redrive.objects.count() == 0


def test_a_move_needs_the_redrive_grant_on_the_destination(billing, rows) -> None:
    QueueAccess.objects.filter(queues="billing.*").update(redrive=True)
    body = {"queue": "billing.invoices", "destination": "support.tickets"}
    refused = billing.post(f"{API}/redrives/", body, format="json")
    assert (refused.status_code, list(refused.json())) == (400, ["destination"])
    body["destination"] = "billing.refunds"
    assert billing.post(f"{API}/redrives/", body, format="json").status_code == 201


def test_another_teams_redrives_are_hidden(billing, rows, api) -> None:
    planned = api.post(f"{API}/redrives/", {"queue": "support.tickets"}, format="json")
    assert planned.status_code == 201
    theirs = planned.json()["id"]
    QueueAccess.objects.filter(queues="billing.*").update(redrive=True)
    mine = billing.post(f"{API}/redrives/", {"queue": "billing.invoices"}, format="json")
    assert mine.status_code == 201
    listed = billing.get(f"{API}/redrives/").json()["results"]
    assert [r["queue"] for r in listed] == ["billing.invoices"]
    absent = billing.get(f"{API}/redrives/999999/").json()
    assert billing.get(f"{API}/redrives/{theirs}/").json() == absent
    assert billing.get(f"{API}/redrives/{theirs}/").status_code == 404
    assert billing.post(f"{API}/redrives/{theirs}/cancel/").status_code == 404
    assert Redrive.objects.get(pk=theirs).status == Redrive.Status.PLANNED
    assert billing.post(f"{API}/redrives/{mine.json()['id']}/cancel/").status_code == 200


def test_parking_keeps_the_model_permission_and_setting_rules(billing, settings) -> None:
    url = f"{API}/queues/support.tickets/messages/"
    response = billing.post(url, {"subject": "s"}, format="json")
    assert response.status_code == 201
    settings.DEADLETTER_API_QUEUES = ["billing.*"]
    refused = billing.post(url, {"subject": "s"}, format="json")
    assert refused.status_code == 400


def test_a_superuser_sees_every_queue(billing, rows, api) -> None:
    assert names(api.get(f"{API}/queues/")) == list(QUEUES)
    assert queues_of(api.get(f"{API}/messages/")) == list(QUEUES)
    assert api.get(message(rows["support.tickets"])).status_code == 200


def test_with_no_queue_access_row_the_model_permissions_alone_apply(billing, rows) -> None:
    QueueAccess.objects.all().delete()
    assert names(billing.get(f"{API}/queues/")) == list(QUEUES)
    assert queues_of(billing.get(f"{API}/messages/")) == list(QUEUES)
    assert billing.get(message(rows["support.tickets"])).status_code == 200
    assert billing.post(f"{API}/queues/support.tickets/drain/").status_code == 200


def test_the_granted_queue_list_and_search_ask_the_same_statements_at_3000_other_queues(
    billing, rows
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.reports.many_queues import park_one_row_queues

    def asked() -> tuple[int, int, list[str]]:
        with CaptureQueriesContext(connection) as listed:
            shown = names(billing.get(f"{API}/queues/"))
        with CaptureQueriesContext(connection) as searched:
            assert queues_of(billing.get(f"{API}/messages/")) == shown
        return len(listed.captured_queries), len(searched.captured_queries), shown

    asked()  # the search indexes the granted queues' new rows first
    few = asked()
    park_one_row_queues(3000, prefix="billingz")
    park_one_row_queues(3000, prefix="a-spam")
    assert asked() == few


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        (b"\x00", ["billing.invoices", "billing.refunds"]),
        (b"billing.j" * 40, ["billing.refunds"]),
        (b"billing.j\xff", ["billing.refunds"]),
        (b"billing.\xc3", []),
        (b"billing.invoices\x00\xff", ["billing.refunds"]),
    ],
)
def test_a_search_cursor_naming_no_granted_queue_goes_on_after_it(
    billing, rows, after: bytes, expected: list[str]
) -> None:
    found = billing.get(f"{API}/messages/", {"after": after.hex()})
    assert queues_of(found) == expected


def subjects(page: dict[str, Any]) -> list[str]:
    return [row["messages"][0]["subject"] for row in page["results"]]


def test_a_search_page_is_full_of_granted_matches_between_other_queues(billing) -> None:
    park("theirs-0 invoice", "theirs-1 invoice", "theirs-2 invoice", queue="a-first")
    park("mine-0 invoice", "mine-1 invoice", "mine-2 invoice", queue="billing.invoices")
    park("theirs-3 invoice", "theirs-4 invoice", queue="billingx")
    first = billing.get(f"{API}/messages/", {"q": "invoice", "limit": 2}).json()
    assert subjects(first) == ["mine-0 invoice", "mine-1 invoice"]
    second = billing.get(first["next"]).json()
    assert subjects(second) == ["mine-2 invoice"]
    assert second["next"] is None


def test_the_archive_list_is_full_of_granted_entries_behind_other_queues(
    billing, monkeypatch
) -> None:
    monkeypatch.setattr(archive_pages, "WINDOW", 4)
    for key in park("mine-0", "mine-1", queue="billing.invoices"):
        discard(key, actor="root")
    for key in park(*(f"theirs-{i}" for i in range(10)), queue="support.tickets"):
        discard(key, actor="root")
    discard(park("mine-2", queue="billing.refunds")[0], actor="root")
    for key in park(*(f"theirs-{i}" for i in range(10, 20)), queue="billingx"):
        discard(key, actor="root")
    first = billing.get(f"{API}/archive/", {"limit": 2}).json()
    assert subjects(first) == ["mine-2", "mine-1"]
    second = billing.get(first["next"]).json()
    assert subjects(second) == ["mine-0"]
    assert second["next"] is None


def test_a_refusal_raised_below_a_view_answers_as_the_api_maps_it_once() -> None:
    """An operator action below the views asks `queue.access.require` itself: its
    `Hidden` is the 404 of a missing object, its `Forbidden` the 403 naming the grant;
    any other deadletter error is still the database's 503."""
    hidden = handle_exception(access.Hidden("support", "retry"), {})
    assert hidden is not None
    assert (hidden.status_code, hidden.data) == (404, {"detail": "Not found."})
    forbidden = handle_exception(access.Forbidden("billing.cards", "edit"), {})
    assert forbidden is not None
    assert forbidden.status_code == 403
    assert forbidden.data == {
        "detail": "Your queue access does not grant edit on queue 'billing.cards'."
    }
    failed = handle_exception(DeadletterError("the queue database failed"), {})
    assert failed is not None
    assert failed.status_code == 503
