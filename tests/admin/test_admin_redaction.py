"""Redacted values in the admin (`DEADLETTER_REDACT`): masked with their length for
a viewer, as they are for a holder of view_unredacted_queuedmessage, on the list,
the message page, the archive, the search and the edit form."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from deadletter.models import ArchivedMessage, QueuedMessage
from deadletter.queue import archive
from deadletter.wire import codec
from tests.admin.test_admin import CHANGELIST, Page, message_link, open_page
from tests.admin.test_admin_archive import ARCHIVE, entry_link
from tests.admin.test_admin_edit import FormPage
from tests.admin.test_admin_search import searched
from tests.factories import park, table_rows

pytestmark = pytest.mark.django_db

VIEWER = ("view_queuedmessage", "view_archivedmessage", "change_queuedmessage")
HOLDER = (*VIEWER, "view_unredacted_queuedmessage")
EMAIL = "ada@example.com"
CARD = "4111111111111111"


@pytest.fixture(autouse=True)
def redact(settings: Any) -> None:
    settings.DEADLETTER_REDACT = {"billing.*": ["username", "fields[0]", "CeleryKwargs.email"]}
    settings.DEADLETTER_HANDLERS = {
        "billing.refunds": {"handler": "tests.factories.ok_handler", "editable": True}
    }


def client_with(codenames: tuple[str, ...]) -> Client:
    user = User.objects.create_user(f"user{len(codenames)}", password="x", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def parked_refund(subject: str = "refund failed") -> bytes:
    (key,) = park(
        subject,
        queue="billing.refunds",
        username=EMAIL,
        fields=[CARD, "12/30"],
        extra={"CeleryKwargs": {"email": EMAIL, "amount": 12}},
    )
    return key


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
    key = parked_refund()
    viewer = client_with(VIEWER)
    listing = open_page(viewer, CHANGELIST)
    assert "••• (15)" in listing.text and EMAIL not in listing.text
    page = message_page(viewer, key)
    assert "••• (15)" in page.text and "••• (16)" in page.text
    assert EMAIL not in page.text and CARD not in page.text
    assert "12/30" in page.text and "refund failed" in page.text


def test_a_holder_of_the_permission_sees_the_values() -> None:
    key = parked_refund()
    holder = client_with(HOLDER)
    assert EMAIL in open_page(holder, CHANGELIST).text
    page = message_page(holder, key)
    assert EMAIL in page.text and CARD in page.text and "•••" not in page.text


def test_a_queue_no_pattern_names_shows_its_values() -> None:
    park("hello", queue="mail", username=EMAIL)
    assert EMAIL in open_page(client_with(VIEWER), CHANGELIST).text


def test_the_archive_masks_for_a_viewer_and_shows_to_a_holder() -> None:
    key = parked_refund()
    archive.discard(key, actor="alice")
    (entry,) = ArchivedMessage.objects.all()
    viewer, holder = client_with(VIEWER), client_with(HOLDER)
    page = open_page(viewer, entry_link(open_page(viewer, ARCHIVE), entry))
    assert "••• (15)" in page.text and EMAIL not in page.text and CARD not in page.text
    page = open_page(holder, entry_link(open_page(holder, ARCHIVE), entry))
    assert EMAIL in page.text and CARD in page.text


def test_the_search_never_matches_a_redacted_value_for_a_viewer() -> None:
    parked_refund("refund one")
    park("ada wrote", queue="billing.refunds", username="someone")
    viewer, holder = client_with(VIEWER), client_with(HOLDER)
    assert listed(searched(viewer, CARD)) == []
    assert listed(searched(holder, CARD)) == ["refund one"]
    assert listed(searched(viewer, "ada")) == ["ada wrote"]
    assert listed(searched(holder, "ada")) == ["refund one", "ada wrote"]


def test_the_edit_form_shows_a_redacted_field_masked_read_only_and_keeps_it() -> None:
    key = parked_refund()
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
    key = parked_refund()
    holder = client_with(HOLDER)
    page = FormPage(holder.get(message_page(holder, key).link("Edit"), follow=True))
    form = page.form_with("etag")
    assert page.fields(form)["username"] == EMAIL
    page.press(holder, form, "Save", username="bob@example.com")
    [(_, value)] = table_rows()
    assert codec.decode(value)[0].username == "bob@example.com"


def test_the_archive_search_never_matches_a_redacted_value_for_a_viewer() -> None:
    archive.discard(parked_refund(), actor="alice")
    viewer, holder = client_with(VIEWER), client_with(HOLDER)

    def found(client: Client) -> int:
        page = open_page(client, ARCHIVE, q=CARD)
        return len({h for h in page.links_under(ARCHIVE) if urlsplit(h).path.endswith("/change/")})

    assert found(viewer) == 0
    assert found(holder) == 1
