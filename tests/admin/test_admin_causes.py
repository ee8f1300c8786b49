"""Causes in the admin, used as an operator uses them: the list and its filters,
Acknowledge, Resolve and Mute for… through the forms the pages render, the links
to the cause's messages and to a redrive of them, the overview's links."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils import timezone

from deadletter.models import Cause
from deadletter.queue import store_failed_msgs
from deadletter.wire.messages import Message
from tests.admin.test_admin import CHANGELIST, Page, open_page

pytestmark = pytest.mark.django_db

CAUSES = "/admin/deadletter/cause/"
OVERVIEW = "/admin/deadletter/queuedmessage/overview/"
REFUSED = "ConnectionError: refused by #"
FULL = "OSError: disk full"


def failed(queue: str, subject: str, error: str) -> bytes:
    """A message parked with its failure, as a capture parks one: a cause noted."""
    return store_failed_msgs(queue, Message(subject=subject, extra={"LastError": error}))


@pytest.fixture
def causes() -> dict[str, Cause]:
    failed("hooks", "h1", "ConnectionError: refused by 10.0.0.7:8443")
    failed("hooks", "h2", "ConnectionError: refused by 10.0.0.9:8443")
    failed("hooks", "h3", "OSError: disk full")
    failed("mail", "m1", "ConnectionError: refused by 10.0.0.1:25")
    store_failed_msgs("hooks", Message(subject="never failed"))
    return {f"{c.queue} {c.signature[:2]}": c for c in Cause.objects.all()}


def cause_rows(page: Page) -> list[str]:
    """The list's rows, each its text squeezed (queue first)."""
    body = page.text.split('id="result_list"')[1].split("</table>")[0].split("<tbody>")[1]
    rows = body.split("<tr")[1:]
    return [" ".join(_text(row).split()) for row in rows]


def _text(html: str) -> str:
    out, inside = [], False
    for ch in html:
        if ch == "<":
            inside = True
        elif ch == ">":
            inside = False
            out.append(" ")
        elif not inside:
            out.append(ch)
    return "".join(out)


def act(client: Client, action: str, *chosen: Cause, url: str = CAUSES) -> Page:
    listing = open_page(client, url)
    form = listing.form_with("_selected_action")
    return listing.submit(client, form, check=[str(c.pk) for c in chosen], action=action)


def test_the_list_shows_each_cause_with_its_columns(admin_client: Client, causes: Any) -> None:
    page = open_page(admin_client, CAUSES)
    for header in ("Queue", "Signature", "Status", "Count", "First seen", "Last seen", "Owner"):
        assert header in page.headers, page.headers
    assert "Messages" in page.headers and "Redrive" in page.headers
    rows = cause_rows(page)
    assert len(rows) == 3
    assert any(row.startswith(f"hooks {REFUSED} open 2") for row in rows), rows
    assert any(row.startswith(f"hooks {FULL} open 1") for row in rows), rows
    assert any(row.startswith(f"mail {REFUSED} open 1") for row in rows), rows


def test_a_long_signature_is_cut_in_the_list_and_whole_on_its_page(admin_client: Client) -> None:
    failed("q", "x", "ValueError: " + "word " * 30)
    (cause,) = Cause.objects.all()
    (row,) = cause_rows(open_page(admin_client, CAUSES))
    assert "…" in row and cause.signature not in row
    change = open_page(admin_client, f"{CAUSES}{cause.pk}/change/")
    assert cause.signature in " ".join(change.text.split())


def test_the_queue_filter_lists_the_queues_and_shows_one(admin_client: Client, causes: Any) -> None:
    page = open_page(admin_client, CAUSES)
    mail = open_page(admin_client, page.link("mail"))
    assert [row.split()[0] for row in cause_rows(mail)] == ["mail"]
    hooks = open_page(admin_client, page.link("hooks"))
    assert [row.split()[0] for row in cause_rows(hooks)] == ["hooks", "hooks"]


def test_the_status_filter_reads_a_mute_past_its_time_as_open(
    admin_client: Client, causes: Any
) -> None:
    Cause.objects.filter(pk=causes["hooks OS"].pk).update(
        status="muted", muted_until=timezone.now() - timedelta(minutes=1)
    )
    Cause.objects.filter(pk=causes["mail Co"].pk).update(status="resolved")
    page = open_page(admin_client, CAUSES)
    opened = cause_rows(open_page(admin_client, page.link("Open")))
    assert sorted(row.split(" ")[1] for row in opened) == ["ConnectionError:", "OSError:"]
    assert not cause_rows_or_empty(open_page(admin_client, page.link("Muted")))
    resolved = cause_rows(open_page(admin_client, page.link("Resolved")))
    assert [row.split()[0] for row in resolved] == ["mail"]


def cause_rows_or_empty(page: Page) -> list[str]:
    return cause_rows(page) if 'id="result_list"' in page.text else []


def test_acknowledge_asks_for_a_note_and_makes_the_user_owner(
    admin_client: Client, causes: Any
) -> None:
    chosen = causes["hooks Co"]
    asked = act(admin_client, "acknowledge_selected", chosen)
    assert "Acknowledge 1 cause" in asked.text
    assert Cause.objects.get(pk=chosen.pk).status == "open"  # nothing until the form is sent
    done = asked.submit(admin_client, asked.form_with("apply"), note="the partner's TLS cert")
    assert "Acknowledged 1 cause(s), owner admin." in done.text
    cause = Cause.objects.get(pk=chosen.pk)
    assert (cause.status, cause.owner, cause.note) == (
        "acknowledged",
        "admin",
        "the partner's TLS cert",
    )
    entry = LogEntry.objects.get(object_id=str(chosen.pk))
    assert entry.action_flag == CHANGE
    assert "Acknowledged, owner admin" in entry.get_change_message()
    assert Cause.objects.get(pk=causes["mail Co"].pk).status == "open"


def test_acknowledge_without_a_note_keeps_the_note(admin_client: Client, causes: Any) -> None:
    chosen = causes["mail Co"]
    Cause.objects.filter(pk=chosen.pk).update(note="said before")
    asked = act(admin_client, "acknowledge_selected", chosen)
    asked.submit(admin_client, asked.form_with("apply"))
    cause = Cause.objects.get(pk=chosen.pk)
    assert (cause.status, cause.note) == ("acknowledged", "said before")


def test_resolve_resolves_and_a_new_failure_reopens(admin_client: Client, causes: Any) -> None:
    chosen = causes["hooks OS"]
    done = act(admin_client, "resolve_selected", chosen)
    assert "Resolved 1 cause(s)" in done.text
    cause = Cause.objects.get(pk=chosen.pk)
    assert cause.status == "resolved" and cause.resolved_at is not None
    assert "Resolved" in LogEntry.objects.get(object_id=str(chosen.pk)).get_change_message()
    failed("hooks", "h4", "OSError: disk full")
    row = [r for r in cause_rows(open_page(admin_client, CAUSES)) if FULL in r]
    assert row[0].startswith(f"hooks {FULL} open (reopened) 2"), row


def test_mute_for_a_day_through_its_form(admin_client: Client, causes: Any) -> None:
    chosen = causes["hooks Co"]
    asked = act(admin_client, "mute_selected", chosen)
    assert "1 hour" in asked.text and "1 week" in asked.text
    before = timezone.now()
    done = asked.submit(admin_client, asked.form_with("apply"), duration="day")
    assert "Muted 1 cause(s) until" in done.text
    cause = Cause.objects.get(pk=chosen.pk)
    assert cause.status == "muted"
    assert before + timedelta(days=1) <= cause.muted_until <= timezone.now() + timedelta(days=1)
    assert "Muted until" in LogEntry.objects.get(object_id=str(chosen.pk)).get_change_message()
    muted = cause_rows(open_page(admin_client, CAUSES, status="muted"))
    assert len(muted) == 1 and "muted until" in muted[0]


def test_mute_until_a_date_needs_a_date_in_the_future(admin_client: Client, causes: Any) -> None:
    chosen = causes["mail Co"]
    asked = act(admin_client, "mute_selected", chosen)
    again = asked.submit(admin_client, asked.form_with("apply"), duration="until", until="")
    assert "Give the date the mute ends." in again.text
    assert Cause.objects.get(pk=chosen.pk).status == "open"
    past = asked.submit(
        admin_client, asked.form_with("apply"), duration="until", until="2001-01-01 10:00"
    )
    assert "already past" in past.text
    when = (timezone.localtime() + timedelta(days=3)).strftime("%Y-%m-%d %H:%M")
    asked.submit(admin_client, asked.form_with("apply"), duration="until", until=when)
    cause = Cause.objects.get(pk=chosen.pk)
    assert cause.status == "muted"
    assert timezone.localtime(cause.muted_until).strftime("%Y-%m-%d %H:%M") == when


def test_the_messages_link_lists_the_messages_of_that_cause(
    admin_client: Client, causes: Any
) -> None:
    page = open_page(admin_client, CAUSES, queue="hooks")
    links = [href for label, href in page.links if label == "messages"]
    assert len(links) == 2
    refused = [h for h in links if "ConnectionError" in h]
    listing = open_page(admin_client, refused[0])
    assert listing.url.startswith(CHANGELIST)
    assert "h1" in listing.text and "h2" in listing.text
    for other in ("h3", "m1", "never failed"):
        assert f">{other}<" not in listing.text


def test_the_redrive_link_opens_the_plan_page_with_that_cause(
    admin_client: Client, causes: Any, settings: Any
) -> None:
    settings.DEADLETTER_HANDLERS = {"mail": "tests.factories.ok_handler"}
    page = open_page(admin_client, CAUSES, queue="mail")
    plan = open_page(admin_client, page.link("Redrive this cause"))
    assert "Redrive matching messages" in plan.text
    fields = {i["name"]: i.get("value") for f in plan.forms for i in f["inputs"]}
    assert fields["queue"] == "mail"
    assert fields["search"] == f'cause:"{REFUSED}"'
    assert "<strong>1 message</strong> of queue <strong>mail</strong>" in plan.text


def test_the_change_page_edits_owner_and_note_only(admin_client: Client, causes: Any) -> None:
    chosen = causes["hooks Co"]
    page = open_page(admin_client, f"{CAUSES}{chosen.pk}/change/")
    form = page.form_with("owner")
    names = {i["name"] for i in form["inputs"]}
    assert "owner" in names and "count" not in names and "status" not in names
    page.submit(admin_client, form, owner="dana", note="on it", count="0", status="resolved")
    cause = Cause.objects.get(pk=chosen.pk)
    assert (cause.owner, cause.note, cause.count, cause.status) == ("dana", "on it", 2, "open")


def staff(*codenames: str) -> Client:
    user = User.objects.create_user("viewer", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def test_view_permission_lists_without_actions_and_change_is_refused(causes: Any) -> None:
    client = staff("view_cause")
    page = open_page(client, CAUSES)
    assert len(cause_rows(page)) == 3
    assert "acknowledge_selected" not in page.text
    assert "Redrive this cause" not in page.text  # no redrive permission either
    response = client.post(f"{CAUSES}{causes['mail Co'].pk}/change/", {"owner": "eve", "note": ""})
    assert response.status_code == 403
    assert Cause.objects.get(pk=causes["mail Co"].pk).owner == ""


def test_without_view_permission_the_list_is_refused(causes: Any) -> None:
    assert staff("view_queuedmessage").get(CAUSES).status_code == 403


def test_the_overview_links_causes_and_each_cause_of_a_queue(
    admin_client: Client, causes: Any
) -> None:
    overview = open_page(admin_client, OVERVIEW)
    assert overview.link("Causes").endswith(CAUSES)
    cause = causes["hooks OS"]
    (link,) = [h for h in overview.links_under(CAUSES) if h == f"{CAUSES}{cause.pk}/change/"]
    assert ("open", link) in overview.links
    page = open_page(admin_client, link)
    assert "OSError: disk full" in page.text
