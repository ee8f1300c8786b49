"""Archived messages in the admin, used as an operator uses it: links followed and
forms submitted from the live list to the archive and back."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from deadletter import drain
from deadletter.models import ArchivedMessage, QueuedMessage
from deadletter.queue import archive, archive_pages
from tests.admin.test_admin import CHANGELIST, Page, open_page, page_keys
from tests.factories import park, parked

pytestmark = pytest.mark.django_db(transaction=True)

ARCHIVE = "/admin/deadletter/archivedmessage/"


def entry_link(page: Page, entry: ArchivedMessage) -> str:
    (found,) = {h for h in page.links_under(ARCHIVE) if h.startswith(f"{ARCHIVE}{entry.pk}/")}
    return found


def delete_from_its_page(client: Client, key: bytes) -> Page:
    page = open_page(client, f"{CHANGELIST}{key.hex()}/change/")
    confirm = open_page(client, page.link("Delete"))
    assert "goes to Archived messages for 30 days" in confirm.text
    return confirm.submit(client, confirm.form_with("post"))


def archived(client: Client, **filters: str) -> Page:
    """The live list's "Archived messages" link (its own, after the sidebar's),
    followed with the live list's filters."""
    live = open_page(client, CHANGELIST, **filters)
    tool = [href for label, href in live.links if label == "Archived messages"][-1]
    return open_page(client, tool)


def discarded(*subjects: str, queue: str = "q", actor: str = "alice") -> list[bytes]:
    found = park(*subjects, queue=queue)
    for key in found:
        archive.discard(key, actor=actor)
    return found


def user_with(*codenames: str) -> Client:
    user = User.objects.create_user("-".join(codenames), password="x", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def test_a_message_deleted_from_its_page_is_archived_with_reason_and_user(admin_client) -> None:
    key, other = park("gone", "kept")
    done = delete_from_its_page(admin_client, key)
    assert "was deleted successfully" in done.text
    assert parked() == ["kept"]
    listing = archived(admin_client)
    assert "gone" in listing.text and "kept" not in listing.text
    (entry,) = ArchivedMessage.objects.all()
    assert (bytes(entry.key), entry.reason, entry.actor) == (key, "deleted", "admin")
    page = open_page(admin_client, entry_link(listing, entry))
    assert "gone" in page.text and "Deleted</b> by admin" in page.text
    assert key.hex() in page.text


@pytest.mark.django_db(transaction=True)
def test_the_page_of_an_archived_message_shows_its_attempts(admin_client, settings) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.failing_handler"}
    settings.DEADLETTER_MAX_ATTEMPTS = 2
    (key,) = park("doomed")
    for _ in range(2):
        drain.Drainer(["q"], drain.DrainOptions(ignore_backoff=True)).run()
    (entry,) = ArchivedMessage.objects.all()
    assert (entry.reason, entry.actor) == ("max_attempts", "drain")
    page = open_page(admin_client, entry_link(archived(admin_client), entry))
    assert "Max Attempts</b> by drain" in page.text
    assert page.text.count("ConnectionError") >= 2  # the timeline's rows and the last error


def test_the_archive_link_carries_the_live_lists_queue_filter(admin_client) -> None:
    discarded("in a", queue="a")
    discarded("in b", queue="b")
    park("live a", queue="a")
    listing = archived(admin_client, queue="a")
    assert "queue=a" in listing.url
    assert "in a" in listing.text and "in b" not in listing.text


def test_filters_by_queue_reason_and_who(admin_client) -> None:
    discarded("by alice", queue="a", actor="alice")
    discarded("by bob", queue="b", actor="bob")
    park("edited one", queue="a")
    listing = archived(admin_client)
    by_queue = open_page(admin_client, listing.link("b"))
    assert "by bob" in by_queue.text and "by alice" not in by_queue.text
    by_reason = open_page(admin_client, listing.link("Edited"))
    assert "by alice" not in by_reason.text and "by bob" not in by_reason.text
    by_deleted = open_page(admin_client, listing.link("Deleted"))
    assert "by alice" in by_deleted.text and "by bob" in by_deleted.text
    by_bob = typed(admin_client, listing, "actor", "bob")
    assert "by bob" in by_bob.text and "by alice" not in by_bob.text
    assert "actor=bob" in by_bob.url


def typed(client: Client, page: Page, name: str, value: str) -> Page:
    """The filter form with the text input `name` filled in and sent, as a browser
    sends a GET form: its hidden inputs and the text as the query string."""
    (form,) = [
        form
        for form in page.forms
        if any(field["name"] == name and field.get("type") == "text" for field in form["inputs"])
    ]
    fields = {
        field["name"]: field.get("value", "")
        for field in form["inputs"]
        if field.get("type") == "hidden"
    }
    return open_page(client, form["action"], **{**fields, name: value})


def test_restore_from_the_page_puts_it_back_under_its_key(admin_client) -> None:
    first, key, last = park("one", "two", "three")
    delete_from_its_page(admin_client, key)
    listing = archived(admin_client)
    (entry,) = ArchivedMessage.objects.all()
    page = open_page(admin_client, entry_link(listing, entry))
    confirm = open_page(admin_client, page.link("Restore…"))
    assert "under its own key" in confirm.text
    done = confirm.submit(admin_client, confirm.form_with("post"))
    assert "Restored to queue q under its own key" in done.text
    assert done.url == f"{CHANGELIST}{key.hex()}/change/"
    assert parked() == ["one", "two", "three"]
    assert not ArchivedMessage.objects.exists()
    logged = LogEntry.objects.filter(action_flag=CHANGE).values_list("object_id", flat=True)
    assert sorted(str(i) for i in logged) == sorted([str(entry.pk), key.hex()])
    assert "two" in open_page(admin_client, CHANGELIST).text


def test_bulk_restore_says_which_got_a_fresh_key(admin_client) -> None:
    keys_ = discarded("a1", "a2", "a3")
    QueuedMessage.objects.create(key=keys_[1], value=b"\x80")  # the key is taken again
    listing = archived(admin_client)
    form = listing.form_with("_selected_action")
    done = listing.submit(admin_client, form, check=page_keys(form), action="restore_selected")
    assert "Restored 3 archived message(s)" in done.text
    assert "1 got a fresh key" in done.text and keys_[1].hex() in done.text
    assert not ArchivedMessage.objects.exists()
    assert QueuedMessage.objects.filter(key__in=[keys_[0], keys_[2]]).count() == 2
    assert QueuedMessage.objects.count() == 4


def test_delete_for_good_needs_its_permission(client) -> None:
    discarded("doomed")
    (entry,) = ArchivedMessage.objects.all()
    viewer = user_with("view_archivedmessage", "view_queuedmessage")
    page = open_page(viewer, f"{ARCHIVE}{entry.pk}/change/")
    assert "Delete" not in {label for label, _ in page.links}
    assert "Restore…" not in {label for label, _ in page.links}
    assert viewer.post(f"{ARCHIVE}{entry.pk}/delete/", {"post": "yes"}).status_code == 403
    assert viewer.post(f"{ARCHIVE}{entry.pk}/restore/", {"post": "yes"}).status_code == 403
    deleter = user_with("view_archivedmessage", "delete_archivedmessage")
    page = open_page(deleter, f"{ARCHIVE}{entry.pk}/change/")
    confirm = open_page(deleter, page.link("Delete"))
    assert "deleted for good" in confirm.text
    confirm.submit(deleter, confirm.form_with("post"))
    assert not ArchivedMessage.objects.exists()
    assert LogEntry.objects.filter(object_id=str(entry.pk), action_flag=DELETION).count() == 1


def test_bulk_delete_for_good(admin_client) -> None:
    discarded("x1", "x2", "x3")
    listing = archived(admin_client)
    form = listing.form_with("_selected_action")
    chosen = page_keys(form)[:2]
    confirm = listing.submit(admin_client, form, check=chosen, action="delete_selected")
    assert "for good" in confirm.text
    done = confirm.submit(admin_client, confirm.form_with("post"))
    assert "Deleted 2 archived message(s) for good" in done.text
    assert ArchivedMessage.objects.count() == 1


def test_without_the_view_permission_the_archive_is_refused(client) -> None:
    discarded("secret")
    (entry,) = ArchivedMessage.objects.all()
    operator = user_with("view_queuedmessage", "delete_queuedmessage")
    assert "Archived messages" not in open_page(operator, CHANGELIST).text
    assert operator.get(ARCHIVE).status_code == 403
    assert operator.get(f"{ARCHIVE}{entry.pk}/change/").status_code == 403


def test_a_bulk_delete_from_the_live_list_archives_each_row(admin_client) -> None:
    stored = park("m0", "m1", "m2", "m3")
    listing = open_page(admin_client, CHANGELIST)
    form = listing.form_with("_selected_action")
    chosen = [stored[0].hex(), stored[2].hex()]
    confirm = listing.submit(admin_client, form, check=chosen, action="delete_selected")
    assert "They go to Archived messages for 30 days" in confirm.text
    confirm.submit(admin_client, confirm.form_with("post"))
    assert parked() == ["m1", "m3"]
    assert sorted(bytes(k) for k in ArchivedMessage.objects.values_list("key", flat=True)) == [
        stored[0],
        stored[2],
    ]


def test_with_the_archive_off_a_delete_says_for_good_and_keeps_nothing(
    admin_client, settings
) -> None:
    settings.DEADLETTER_ARCHIVE_FOR = timedelta(0)
    (key,) = park("gone for good")
    page = open_page(admin_client, f"{CHANGELIST}{key.hex()}/change/")
    confirm = open_page(admin_client, page.link("Delete"))
    assert "It is deleted for good" in confirm.text
    confirm.submit(admin_client, confirm.form_with("post"))
    assert parked() == [] and not ArchivedMessage.objects.exists()


def test_a_filtered_page_looks_through_a_window_and_goes_on(admin_client, monkeypatch) -> None:
    monkeypatch.setattr(archive_pages, "WINDOW", 5)
    discarded("rare one", actor="carol")
    discarded(*(f"common {i}" for i in range(12)), actor="alice")
    listing = archived(admin_client)
    first = typed(admin_client, listing, "actor", "carol")
    assert "rare one" not in first.text and "Looked through 5 archived messages" in first.text
    second = open_page(admin_client, first.link("next ›"))
    third = open_page(admin_client, second.link("next ›"))
    assert "rare one" in third.text
    assert "next ›" not in {label for label, _ in third.links}


def test_the_search_checks_each_archived_message(admin_client) -> None:
    discarded("invoice 42 failed", "welcome mail")
    listing = archived(admin_client)
    found = open_page(admin_client, listing.url, q="subject:invoice")
    assert "invoice 42 failed" in found.text and "welcome mail" not in found.text
    bad = open_page(admin_client, listing.url, q='"unclosed')
    assert "Search:" in bad.text


def test_archive_pages_ask_the_same_statements_at_any_size(admin_client) -> None:
    discarded("few")

    def statements() -> int:
        with CaptureQueriesContext(connection) as ctx:
            open_page(admin_client, ARCHIVE)
        return len(ctx.captured_queries)

    few = statements()
    discarded(*(f"m{i}" for i in range(120)))
    listing = open_page(admin_client, ARCHIVE)
    assert statements() == few
    assert not any("COUNT(" in q["sql"].upper() for q in _captured(admin_client))
    older = open_page(admin_client, listing.link("next ›"))
    assert "‹ newest" in older.text


def _captured(client: Client) -> list[dict[str, str]]:
    with CaptureQueriesContext(connection) as ctx:
        open_page(client, ARCHIVE)
    return [q for q in ctx.captured_queries if "archivedmessage" in q["sql"]]


@pytest.mark.parametrize(
    "query",
    ["queue=a%00b", "actor=%00", "reason=nope", "cursor=zz", "cursor=1-2&queue=q", "q=%00x"],
)
def test_odd_archive_queries_never_answer_500(admin_client, query) -> None:
    discarded("odd")
    response = admin_client.get(f"{ARCHIVE}?{query}", follow=True)
    assert response.status_code == 200
    assert admin_client.get(f"{ARCHIVE}?id__gt=1").status_code == 400


def test_a_confirmation_says_each_queues_retention(admin_client, settings) -> None:
    settings.DEADLETTER_HANDLERS = {
        "kept": {"handler": "tests.factories.ok_handler", "archive_for": None},
        "off": {"handler": "tests.factories.ok_handler", "archive_for": timedelta(0)},
    }
    stored = [*park("k", queue="kept"), *park("o", queue="off"), *park("d", queue="q")]
    listing = open_page(admin_client, CHANGELIST)
    form = listing.form_with("_selected_action")
    confirm = listing.submit(admin_client, form, check=page_keys(form), action="delete_selected")
    assert (
        "Those of kept go to Archived messages for ever, where they can be restored; "
        "those of off are deleted for good (no archive is kept); "
        "those of q go to Archived messages for 30 days" in confirm.text
    )
    across = listing.submit(
        admin_client, form, check=page_keys(form), action="delete_selected", select_across="1"
    )
    assert "Those of other queues go to Archived messages for 30 days" in across.text
    confirm.submit(admin_client, confirm.form_with("post"))
    archived_keys = {bytes(k) for k in ArchivedMessage.objects.values_list("key", flat=True)}
    assert archived_keys == {stored[0], stored[2]} and not QueuedMessage.objects.exists()
