"""Per-queue access in the admin, used as a billing-team operator uses it: they see
and act on `billing.*` only, in every list, page and action; another team's
message is a 404. A superuser, and every user of a project with no rule, see
what they saw before rules existed."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.http import Http404
from django.test import Client
from django.test.utils import CaptureQueriesContext

from deadletter.admin import QueuedMessageAdmin, searching
from deadletter.admin import access as admin_access
from deadletter.admin.archive import ArchivedMessageAdmin
from deadletter.drain.redrives import plan_redrive
from deadletter.models import ArchivedMessage, QueueAccess, Redrive
from deadletter.queue import access, archive_pages, fetch_failed_msgs, store_failed_msgs
from deadletter.queue.archive import discard
from deadletter.wire.messages import Message
from tests.admin.test_admin import CHANGELIST, Page, open_page, page_keys

pytestmark = pytest.mark.django_db

OVERVIEW = f"{CHANGELIST}overview/"
ARCHIVE = "/admin/deadletter/archivedmessage/"
REDRIVES = "/admin/deadletter/redrive/"
CAUSES = "/admin/deadletter/cause/"
RULES = "/admin/deadletter/queueaccess/"
PERMISSIONS = (
    "view_queuedmessage",
    "delete_queuedmessage",
    "change_queuedmessage",
    "drain_queuedmessage",
    "redrive_queuedmessage",
    "view_archivedmessage",
    "restore_archivedmessage",
    "delete_archivedmessage",
    "view_redrive",
    "view_cause",
)


def park(queue: str, subject: str, error: str | None = None) -> bytes:
    extra = {"LastError": error} if error else {}
    return store_failed_msgs(queue, Message(subject=subject, extra=extra))


@pytest.fixture
def rows() -> dict[str, bytes]:
    """Messages of three teams; each failed with its own cause."""
    return {
        "bill-cards": park("billing.cards", "bill-cards", "CardError: declined #"),
        "bill-refunds": park("billing.refunds", "bill-refunds", "RefundError: late"),
        "mail-1": park("mail", "mail-1", "SMTPError: 550"),
        "support-1": park("support", "support-1", "TicketError: closed"),
        "support-2": park("support.eu", "support-2", "TicketError: closed"),
    }


def staff(name: str) -> User:
    user = User.objects.create_user(name, password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=PERMISSIONS))
    return user


@pytest.fixture
def billing() -> Client:
    """A billing-team operator: the group's `billing.*` rule (view, retry, delete)
    and their own `mail` rule (view only); every model permission."""
    user = staff("bill")
    team = Group.objects.create(name="billing")
    user.groups.add(team)
    QueueAccess.objects.create(group=team, queues="billing.*", retry=True, delete=True)
    QueueAccess.objects.create(user=user, queues="mail")
    other = Group.objects.create(name="support")
    QueueAccess.objects.create(group=other, queues="support*", retry=True, delete=True)
    client = Client()
    client.force_login(user)
    return client


def subjects(page: Page) -> set[str]:
    return set(re.findall(r"\b(bill-\w+|mail-\d|support-\d)\b", page.text))


def test_the_changelist_lists_only_the_granted_queues(billing: Client, rows: Any) -> None:
    page = open_page(billing, CHANGELIST)
    assert subjects(page) == {"bill-cards", "bill-refunds", "mail-1"}
    assert subjects(open_page(billing, CHANGELIST, queue="support")) == set()


def test_the_queue_filter_offers_only_the_granted_queues(billing: Client, rows: Any) -> None:
    page = open_page(billing, CHANGELIST)
    offered = {href.split("queue=")[1] for _, href in page.links if "?queue=" in href}
    assert offered == {"billing.cards", "billing.refunds", "mail"}


def test_the_cause_filter_offers_only_the_granted_queues_causes(billing: Client, rows: Any) -> None:
    page = open_page(billing, CHANGELIST)
    assert "CardError" in page.text and "SMTPError" in page.text
    assert "TicketError" not in page.text


def test_the_overview_shows_only_the_granted_queues_and_totals_over_them(
    billing: Client, rows: Any
) -> None:
    page = open_page(billing, OVERVIEW)
    assert "billing.cards" in page.text and "mail" in page.text
    assert "support" not in page.text
    assert "The queues you may see: 3 row(s)" in page.text


@pytest.mark.parametrize("suffix", ["change/", "history/", "delete/", "edit/"])
def test_another_teams_message_is_a_404_on_every_page(
    billing: Client, rows: Any, suffix: str
) -> None:
    url = f"{CHANGELIST}{rows['support-1'].hex()}/{suffix}"
    assert billing.get(url).status_code == 404
    assert billing.post(url, {"post": "yes"}).status_code == 404
    assert [q.msg.subject for q in fetch_failed_msgs("support")] == ["support-1"]


def test_retry_now_of_another_teams_message_is_a_404(billing: Client, rows: Any) -> None:
    url = f"{CHANGELIST}{rows['support-1'].hex()}/retry/"
    assert billing.post(url).status_code == 404
    absent = f"{CHANGELIST}{rows['support-1'].hex()[:-2]}ff/change/"
    assert billing.get(absent).status_code == 404  # an absent key of that queue: the same


def test_a_granted_message_opens_with_only_the_granted_buttons(billing: Client, rows: Any) -> None:
    page = open_page(billing, f"{CHANGELIST}{rows['bill-cards'].hex()}/change/")
    assert "bill-cards" in page.text
    assert "Retry now" in page.text
    assert any(label == "Delete" for label, _ in page.links)
    viewed = open_page(billing, f"{CHANGELIST}{rows['mail-1'].hex()}/change/")
    assert "Retry now" not in viewed.text
    assert not any(label == "Delete" for label, _ in viewed.links)
    assert billing.get(f"{CHANGELIST}{rows['mail-1'].hex()}/delete/").status_code == 403
    assert billing.post(f"{CHANGELIST}{rows['mail-1'].hex()}/retry/").status_code == 403


def test_bulk_delete_deletes_only_the_rows_the_user_may_delete(billing: Client, rows: Any) -> None:
    chosen = [rows["bill-cards"], rows["mail-1"], rows["support-1"]]
    data = {"action": "delete_selected", "_selected_action": [k.hex() for k in chosen]}
    confirm = Page(billing.post(CHANGELIST, data, follow=True))
    assert "2 selected message(s) are not in queues where you may delete" in confirm.text
    form = confirm.form_with("post")
    posted = [i["value"] for i in form["inputs"] if i["name"] == "_selected_action"]
    assert set(posted) == {k.hex() for k in chosen}  # as posted: judged again on "yes"
    done = confirm.submit(billing, form)
    assert "Successfully deleted 1 queued message(s)." in done.text
    assert fetch_failed_msgs("billing.cards") == []
    assert [q.msg.subject for q in fetch_failed_msgs("mail")] == ["mail-1"]
    assert [q.msg.subject for q in fetch_failed_msgs("support")] == ["support-1"]


def test_the_archive_lists_and_filters_only_the_granted_queues(billing: Client, rows: Any) -> None:
    for name in ("bill-refunds", "support-2"):
        discard(rows[name], actor="root")
    page = open_page(billing, ARCHIVE)
    assert subjects(page) == {"bill-refunds"}
    offered = {href.split("queue=")[1] for _, href in page.links if "?queue=" in href}
    assert offered == {"billing.refunds"}
    foreign = ArchivedMessage.objects.get(queue="support.eu")
    restore = f"{ARCHIVE}{foreign.pk}/restore/"
    assert "support-2" not in billing.post(restore, follow=True).content.decode()
    assert ArchivedMessage.objects.filter(queue="support.eu").exists()


def test_restore_needs_retry_on_the_entrys_queue(billing: Client, rows: Any) -> None:
    discard(rows["mail-1"], actor="root")
    entry = ArchivedMessage.objects.get(queue="mail")
    assert billing.post(f"{ARCHIVE}{entry.pk}/restore/").status_code == 403
    discard(rows["bill-cards"], actor="root")
    mine = ArchivedMessage.objects.get(queue="billing.cards")
    billing.post(f"{ARCHIVE}{mine.pk}/restore/", follow=True)
    assert [q.msg.subject for q in fetch_failed_msgs("billing.cards")] == ["bill-cards"]


def test_redrives_list_and_plan_only_the_granted_queues(
    billing: Client, rows: Any, settings: Any
) -> None:
    settings.DEADLETTER_HANDLERS = {
        "billing.cards": "tests.factories.ok_handler",
        "support": "tests.factories.ok_handler",
    }
    mine = plan_redrive(queue="billing.cards", started_by="root")
    theirs = plan_redrive(queue="support", started_by="root")
    listing = open_page(billing, REDRIVES)
    assert f"{REDRIVES}{mine.pk}/change/" in listing.text
    assert f"{REDRIVES}{theirs.pk}/change/" not in listing.text
    assert billing.post(f"{REDRIVES}{theirs.pk}/cancel/").status_code == 404
    refused = billing.post(f"{REDRIVES}plan/", {"queue": "support", "concurrency": "1"})
    assert "You may not redrive messages of this queue." in refused.content.decode()
    # billing's rule grants no redrive: its own queue is refused too, never counted
    planned = billing.post(
        f"{REDRIVES}plan/", {"queue": "billing.cards", "concurrency": "1", "_redrive": "1"}
    )
    assert "You may not redrive messages of this queue." in planned.content.decode()
    assert Redrive.objects.count() == 2


def test_causes_lists_only_the_granted_queues(billing: Client, rows: Any) -> None:
    page = open_page(billing, CAUSES)
    assert "CardError" in page.text and "SMTPError" in page.text
    assert "TicketError" not in page.text


def test_a_superuser_sees_every_queue(admin_client: Client, billing: Client, rows: Any) -> None:
    assert subjects(open_page(admin_client, CHANGELIST)) == set(rows)
    assert admin_client.get(f"{CHANGELIST}{rows['support-1'].hex()}/change/").status_code == 200


def test_with_no_rule_the_changelist_asks_what_it_asked_before(rows: Any) -> None:
    """No `QueueAccess` row: a staff user's list reads the queue table with exactly
    the statements a superuser's does, plus the one that finds no rule."""
    user = staff("plain")
    root = User.objects.create_superuser("root", password="pw")

    def statements(who: User) -> list[str]:
        client = Client()
        client.force_login(who)
        client.get(CHANGELIST)  # sessions, content types: read once
        access.forget(who)
        with CaptureQueriesContext(connection) as ctx:
            page = open_page(client, CHANGELIST)
        assert subjects(page) == set(rows)
        return [q["sql"] for q in ctx.captured_queries]

    plain, super_ = statements(user), statements(root)
    table = "deadletter_queuedmessage"
    assert [s for s in plain if table in s and "queueaccess" not in s] == [
        s for s in super_ if table in s
    ]
    assert len([s for s in plain if "deadletter_queueaccess" in s]) == 1


def test_the_rules_admin_wants_one_holder_and_a_pattern(admin_client: Client) -> None:
    team = Group.objects.create(name="billing")
    user = User.objects.create_user("bill")
    both = {"group": team.pk, "user": user.pk, "queues": "billing.*", "view": "on"}
    page = admin_client.post(f"{RULES}add/", both)
    assert "exactly one of them" in page.content.decode()
    empty = admin_client.post(f"{RULES}add/", {"group": team.pk, "queues": " ", "view": "on"})
    assert "This field is required." in empty.content.decode()
    done = admin_client.post(
        f"{RULES}add/",
        {"group": team.pk, "queues": "billing.*", "view": "on", "retry": "on", "confirm": "on"},
    )
    assert done.status_code == 302
    rule = QueueAccess.objects.get()
    assert (rule.group, rule.queues, rule.view, rule.retry, rule.delete) == (
        team,
        "billing.*",
        True,
        True,
        False,
    )
    listing = open_page(admin_client, RULES)
    assert "group billing" in listing.text and "billing.*" in listing.text
    admin_client.post(f"{RULES}{rule.pk}/delete/", {"post": "yes"})
    assert not QueueAccess.objects.exists()


def test_pages_go_from_one_granted_range_to_the_next(
    billing: Client, rows: Any, monkeypatch: Any
) -> None:
    monkeypatch.setattr(QueuedMessageAdmin, "list_per_page", 2)
    first = open_page(billing, CHANGELIST)
    assert subjects(first) == {"bill-cards", "bill-refunds"}
    second = open_page(billing, first.link("next ›"))
    assert subjects(second) == {"mail-1"}
    back = open_page(billing, second.link("‹ previous"))
    assert subjects(back) == {"bill-cards", "bill-refunds"}


def shown(page: Page) -> list[str]:
    """The `mine-N` / `theirs-N` subjects a page shows, in order, each once."""
    return list(dict.fromkeys(re.findall(r"\b(?:theirs|mine)-\d+\b", page.text)))


def test_a_search_page_is_full_of_granted_matches_between_other_queues(
    billing: Client, monkeypatch: Any
) -> None:
    monkeypatch.setattr(QueuedMessageAdmin, "list_per_page", 2)
    for i in range(3):
        park("a-other", f"theirs-{i} invoice")
    for i in range(3):
        park("billing.cards", f"mine-{i} invoice")
    for i in range(3, 6):
        park("support", f"theirs-{i} invoice")
    first = open_page(billing, CHANGELIST, q="invoice")
    assert shown(first) == ["mine-0", "mine-1"]
    second = open_page(billing, first.link("next ›"))
    assert shown(second) == ["mine-2"]
    assert "next ›" not in {label for label, _ in second.links}
    back = open_page(billing, second.link("‹ previous"))
    assert shown(back) == ["mine-0", "mine-1"]


def test_delete_all_matching_counts_only_the_granted_matches(
    billing: Client, monkeypatch: Any
) -> None:
    monkeypatch.setattr(searching, "MAX_ACTION_ROWS", 2)
    for i in range(3):
        park("support", f"theirs-{i} invoice")
    park("billing.cards", "mine-0 invoice")
    page = open_page(billing, CHANGELIST, q="invoice")
    form = page.form_with("_selected_action")
    confirm = page.submit(
        billing, form, check=page_keys(form), action="delete_selected", select_across="1"
    )
    confirm.submit(billing, confirm.form_with("post"))
    assert fetch_failed_msgs("billing.cards") == []
    assert len(fetch_failed_msgs("support")) == 3


def test_the_archive_list_is_full_of_granted_entries_behind_other_queues(
    billing: Client, monkeypatch: Any
) -> None:
    monkeypatch.setattr(ArchivedMessageAdmin, "list_per_page", 2)
    monkeypatch.setattr(archive_pages, "WINDOW", 4)
    for subject in ("mine-0", "mine-1"):
        discard(park("billing.cards", subject), actor="root")
    for i in range(10):
        discard(park("support", f"theirs-{i}"), actor="root")
    discard(park("billing.refunds", "mine-2"), actor="root")
    for i in range(10, 20):
        discard(park("support", f"theirs-{i}"), actor="root")
    first = open_page(billing, ARCHIVE)
    assert shown(first) == ["mine-2", "mine-1"]
    second = open_page(billing, first.link("next ›"))
    assert shown(second) == ["mine-0"]
    assert "next ›" not in {label for label, _ in second.links}


def test_a_refusal_raised_below_a_page_answers_as_the_admin_maps_it_once() -> None:
    """An operator action below the admin asks `queue.access.require` itself: within
    `answered`, its `Hidden` is the 404 of a missing message, its `Forbidden` a 403."""
    with pytest.raises(Http404, match="No such message."), admin_access.answered():
        access.require(access.Scope(unrestricted=False), "support")
    only_view = access.Scope([("billing.*", ["view"])], unrestricted=False)
    with pytest.raises(PermissionDenied), admin_access.answered():
        access.require(only_view, "billing.cards", "delete")
    with admin_access.answered():
        access.require(only_view, "billing.cards")
