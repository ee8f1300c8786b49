"""Redacted values in the admin (`DEADLETTER_REDACT`): masked with their length for
a viewer, as they are for a holder of view_unredacted_queuedmessage, on the list,
the message page, the archive, the search and the edit form."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from deadletter.drain import Drainer
from deadletter.models import ArchivedMessage, Cause, QueuedMessage
from deadletter.queue import archive
from deadletter.wire import codec
from tests.admin.test_admin import CHANGELIST, Page, message_link, open_page
from tests.admin.test_admin_archive import ARCHIVE, entry_link
from tests.admin.test_admin_causes import CAUSES
from tests.admin.test_admin_edit import FormPage
from tests.admin.test_admin_search import searched
from tests.factories import BILLING_REDACT, CARD, EMAIL, park, park_refund, table_rows

pytestmark = pytest.mark.django_db

VIEWER = ("view_queuedmessage", "view_archivedmessage", "change_queuedmessage")
HOLDER = (*VIEWER, "view_unredacted_queuedmessage")


@pytest.fixture(autouse=True)
def redact(settings: Any) -> None:
    settings.DEADLETTER_REDACT = BILLING_REDACT
    settings.DEADLETTER_HANDLERS = {
        "billing.refunds": {"handler": "tests.factories.ok_handler", "editable": True}
    }


def client_with(codenames: tuple[str, ...]) -> Client:
    user = User.objects.create_user(f"user{len(codenames)}", password="x", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def listed(page: Page) -> list[str]:
    """The subjects of the rows the page links to, in order (a viewer has no row
    checkboxes: no action is open to them)."""
    by_key = {m.key_hex: m for m in QueuedMessage.objects.all()}
    paths = [urlsplit(h).path for h in page.links_under(CHANGELIST)]
    linked = [p.split("/")[-3] for p in paths if p.endswith("/change/")]
    shown = dict.fromkeys(k for k in linked if k in by_key)
    return [codec.decode(bytes(by_key[k].value))[0].subject for k in shown]


def message_page(client: Client, key: bytes) -> Page:
    return open_page(client, message_link(open_page(client, CHANGELIST), key))


def test_a_viewer_sees_the_mask_and_its_length_on_the_list_and_the_page() -> None:
    key = park_refund()
    viewer = client_with(VIEWER)
    listing = open_page(viewer, CHANGELIST)
    assert "••• (15)" in listing.text and EMAIL not in listing.text
    page = message_page(viewer, key)
    assert "••• (15)" in page.text and "••• (16)" in page.text
    assert EMAIL not in page.text and CARD not in page.text
    assert "12/30" in page.text and "refund failed" in page.text


def test_a_holder_of_the_permission_sees_the_values() -> None:
    key = park_refund()
    holder = client_with(HOLDER)
    assert EMAIL in open_page(holder, CHANGELIST).text
    page = message_page(holder, key)
    assert EMAIL in page.text and CARD in page.text and "•••" not in page.text


def test_a_queue_no_pattern_names_shows_its_values() -> None:
    park("hello", queue="mail", username=EMAIL)
    assert EMAIL in open_page(client_with(VIEWER), CHANGELIST).text


def test_the_archive_masks_for_a_viewer_and_shows_to_a_holder() -> None:
    key = park_refund()
    archive.discard(key, actor="alice")
    (entry,) = ArchivedMessage.objects.all()
    viewer, holder = client_with(VIEWER), client_with(HOLDER)
    page = open_page(viewer, entry_link(open_page(viewer, ARCHIVE), entry))
    assert "••• (15)" in page.text and EMAIL not in page.text and CARD not in page.text
    page = open_page(holder, entry_link(open_page(holder, ARCHIVE), entry))
    assert EMAIL in page.text and CARD in page.text


def test_the_search_never_matches_a_redacted_value_for_a_viewer() -> None:
    park_refund("refund one")
    park("ada wrote", queue="billing.refunds", username="someone")
    viewer, holder = client_with(VIEWER), client_with(HOLDER)
    assert listed(searched(viewer, CARD)) == []
    assert listed(searched(holder, CARD)) == ["refund one"]
    assert listed(searched(viewer, "ada")) == ["ada wrote"]
    assert listed(searched(holder, "ada")) == ["refund one", "ada wrote"]


def test_the_edit_form_shows_a_redacted_field_masked_read_only_and_keeps_it() -> None:
    key = park_refund()
    viewer = client_with(VIEWER)
    page = FormPage(viewer.get(message_page(viewer, key).link("Edit"), follow=True))
    form = page.form_with("etag")
    assert "username" not in page.fields(form)  # disabled: a browser does not send it
    assert "fields" not in page.fields(form)
    assert "••• (15)" in page.text and EMAIL not in page.text and CARD not in page.text
    assert "Not editable: redacted" in page.text
    done = page.press(viewer, form, "Save", subject="refund retried", username="mallory")
    assert "Saved: subject changed" in done.text
    [(_, value)] = table_rows()
    msg = codec.decode(value)[0]
    assert (msg.subject, msg.username, msg.fields) == ("refund retried", EMAIL, [CARD, "12/30"])
    assert msg.extra["CeleryKwargs"] == {"email": EMAIL, "amount": 12}


def test_a_holder_edits_a_redacted_field() -> None:
    key = park_refund()
    holder = client_with(HOLDER)
    page = FormPage(holder.get(message_page(holder, key).link("Edit"), follow=True))
    form = page.form_with("etag")
    assert page.fields(form)["username"] == EMAIL
    page.press(holder, form, "Save", username="bob@example.com")
    [(_, value)] = table_rows()
    assert codec.decode(value)[0].username == "bob@example.com"


def test_the_archive_search_never_matches_a_redacted_value_for_a_viewer() -> None:
    archive.discard(park_refund(), actor="alice")
    viewer, holder = client_with(VIEWER), client_with(HOLDER)

    def found(client: Client) -> int:
        page = open_page(client, ARCHIVE, q=CARD)
        return len({h for h in page.links_under(ARCHIVE) if urlsplit(h).path.endswith("/change/")})

    assert found(viewer) == 0
    assert found(holder) == 1


# --- error texts that quote a redacted value ------------------------------------------


def failed_refund(settings: Any) -> bytes:
    """A refund whose handler failed once, its error quoting the customer's address."""
    settings.DEADLETTER_HANDLERS = {
        "billing.refunds": {"handler": "tests.factories.refusing_handler", "editable": True}
    }
    key = park_refund()
    Drainer().run()
    return key


def test_an_error_quoting_a_redacted_value_is_masked_on_the_list_and_the_page(
    settings: Any,
) -> None:
    key = failed_refund(settings)
    viewer, holder = client_with(VIEWER), client_with(HOLDER)
    assert EMAIL not in open_page(viewer, CHANGELIST).text
    page = message_page(viewer, key)
    assert EMAIL not in page.text
    assert page.text.count("&lt;••• (15)&gt; refused") == 2  # LastError and the timeline
    page = message_page(holder, key)
    assert page.text.count(f"&lt;{EMAIL}&gt; refused") == 2


def test_an_error_quoting_a_redacted_value_is_masked_in_the_archive(settings: Any) -> None:
    archive.discard(failed_refund(settings), actor="alice")
    (entry,) = ArchivedMessage.objects.all()
    viewer, holder = client_with(VIEWER), client_with(HOLDER)
    listing = open_page(viewer, ARCHIVE)
    assert "••• (15)&gt; refused" in listing.text and EMAIL not in listing.text
    page = open_page(viewer, entry_link(listing, entry))
    assert EMAIL not in page.text and "&lt;••• (15)&gt; refused" in page.text
    page = open_page(holder, entry_link(open_page(holder, ARCHIVE), entry))
    assert f"&lt;{EMAIL}&gt; refused" in page.text


def test_a_cause_never_quotes_a_redacted_value(settings: Any, admin_client: Client) -> None:
    """A signature is shown to everyone who sees the queue, and in alerts: it is
    written masked, bare, so two customers' refusals are one cause."""
    failed_refund(settings)
    (key,) = park("refund two", queue="billing.refunds", username="bob.smith@example.org")
    Drainer().run()
    (cause,) = Cause.objects.all()
    assert cause.signature == "RecipientRefused: <•••> refused: # # no such user"
    assert cause.count == 3
    causes = open_page(admin_client, CAUSES)
    assert "&lt;•••&gt; refused" in causes.text and EMAIL not in causes.text


@pytest.mark.django_db(transaction=True)
def test_a_retry_logged_by_a_holder_shows_the_error_masked_in_history(settings: Any) -> None:
    """A `LogEntry` is read by whoever opens the History: it keeps the masked text."""
    key = failed_refund(settings)
    holder = client_with((*HOLDER, "drain_queuedmessage"))
    page = message_page(holder, key)
    action = page.text.split('formaction="')[1].split('"')[0]
    back = page.submit(holder, {**page.forms[0], "action": action})
    history = open_page(holder, back.link("History"))
    assert "Retried: failed: RecipientRefused: &lt;••• (15)&gt; refused" in history.text
    assert EMAIL not in history.text


def test_an_edit_of_a_redacted_value_is_logged_masked(settings: Any) -> None:
    key = park_refund()
    holder = client_with(HOLDER)
    page = FormPage(holder.get(message_page(holder, key).link("Edit"), follow=True))
    done = page.press(holder, page.form_with("etag"), "Save", username="bob@example.com")
    history = open_page(holder, done.link("History"))
    assert 'username: "••• (15)" → "••• (15)"' in history.text.replace("&quot;", '"')
    assert EMAIL not in history.text and "bob@example.com" not in history.text


def test_an_edit_that_mends_a_redacted_value_masks_the_old_one_in_its_errors(
    settings: Any,
) -> None:
    """The errors quote the address the message no longer holds: masked for every
    viewer once edited; the archive's `edited` entry keeps it for a holder."""
    settings.DEADLETTER_HANDLERS = {
        "billing.refunds": {"handler": "tests.factories.refusing_handler", "editable": True}
    }
    (key,) = park("refund failed", queue="billing.refunds", username=EMAIL)
    Drainer().run()
    holder = client_with(HOLDER)
    page = FormPage(holder.get(message_page(holder, key).link("Edit"), follow=True))
    page.press(holder, page.form_with("etag"), "Save", username="ada@example.org")
    for client in (holder, client_with(VIEWER)):
        shown = message_page(client, key)
        assert EMAIL not in shown.text
        assert shown.text.count("&lt;••• (15)&gt; refused") == 2
    (entry,) = ArchivedMessage.objects.filter(reason=ArchivedMessage.Reason.EDITED)
    original = open_page(holder, entry_link(open_page(holder, ARCHIVE), entry))
    assert f"&lt;{EMAIL}&gt; refused" in original.text
