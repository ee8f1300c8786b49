"""The message page's Edit, used as an operator uses it: the Edit link followed, the
form the page renders submitted, the History page read."""

from __future__ import annotations

from typing import Any
from urllib.parse import urljoin

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from deadletter.contrib.tasks import capture
from deadletter.models import ArchivedMessage, QueuedMessage
from deadletter.queue import dequeue, edits
from deadletter.wire import codec
from deadletter.wire.messages import Message
from tests.admin.test_admin import CHANGELIST, Page, message_link, open_page
from tests.factories import park, table_rows

pytestmark = pytest.mark.django_db

delivered: list[Message] = []


def deliver(msg: Message) -> None:
    """The queue's handler: records what it was handed."""
    delivered.append(msg)


@pytest.fixture(autouse=True)
def handlers(settings: Any) -> Any:
    settings.DEADLETTER_HANDLERS = {
        "q": {"handler": "tests.admin.test_admin_edit.deliver", "editable": True},
        "fixed": "tests.admin.test_admin_edit.deliver",
    }
    delivered.clear()
    yield
    delivered.clear()


class FormPage(Page):
    """A page whose forms also carry their textareas (with the text a browser
    submits) and leave out disabled fields, as a browser does."""

    def __init__(self, response: Any) -> None:
        self._area: dict[str, Any] | None = None
        super().__init__(response)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "textarea" and self.forms:
            self._area = {**a, "type": "textarea", "value": ""}
            return
        super().handle_starttag(tag, attrs)

    def handle_data(self, data: str) -> None:
        if self._area is not None:
            self._area["value"] += data
            return
        super().handle_data(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "textarea" and self._area is not None:
            value = self._area["value"]
            self._area["value"] = (
                value[2:] if value.startswith("\r\n") else value.removeprefix("\n")
            )
            self.forms[-1]["inputs"].append(self._area)
            self._area = None
            return
        super().handle_endtag(tag)

    def fields(self, form: dict[str, Any]) -> dict[str, str]:
        """What a browser submits of `form` before a button is clicked."""
        return {
            i["name"]: i.get("value", "")
            for i in form["inputs"]
            if i.get("type", "text") not in ("submit", "button") and "disabled" not in i
        }

    def press(self, client: Client, form: dict[str, Any], button: str, **changed: str) -> Page:
        names = {i.get("value"): i["name"] for i in form["inputs"] if i.get("type") == "submit"}
        data = {**self.fields(form), **changed, names[button]: button}
        action = urljoin(self.url, form["action"])
        return FormPage(client.post(action, data, follow=True))

    def label_of(self, form: dict[str, Any], text: str) -> str:
        """The field name of extra key `text` (its textarea is labelled with it)."""
        found = [n for n in self.fields(form) if f'for="id_{n}">{text}:' in self.text]
        assert len(found) == 1, (text, found)
        return found[0]


def edit_form(client: Client, key: bytes) -> tuple[FormPage, dict[str, Any]]:
    """The edit form, reached as an operator reaches it: list, message, Edit."""
    message = open_page(client, message_link(open_page(client, CHANGELIST), key))
    page = FormPage(client.get(message.link("Edit"), follow=True))
    assert page.response.status_code == 200
    return page, page.form_with("etag")


def subject_of(key: bytes) -> str:
    return codec.decode(dict(table_rows())[key])[0].subject


def test_edit_from_the_message_page_saves_and_the_history_shows_the_diff(admin_client) -> None:
    (key,) = park("Ocjena: Matematika", username="ana", extra={"Site": "x", "Order": 7})
    original = dict(table_rows())[key]
    page, form = edit_form(admin_client, key)
    assert page.fields(form)["subject"] == "Ocjena: Matematika"
    done = page.press(
        admin_client,
        form,
        "Save",
        subject="Ocjena: Fizika",
        **{page.label_of(form, "Site"): '"y"'},
    )
    assert "Saved: subject, extra.Site changed" in done.text
    assert done.url == f"{CHANGELIST}{key.hex()}/change/"
    [(stored_key, value)] = table_rows()
    msg = codec.decode(value)[0]
    assert (stored_key, msg.subject, msg.username, msg.extra) == (
        key,
        "Ocjena: Fizika",
        "ana",
        {"Site": "y", "Order": 7},
    )
    entry = ArchivedMessage.objects.get(key=key)
    assert (entry.reason, entry.actor, bytes(entry.value)) == ("edited", "admin", original)
    history = open_page(admin_client, done.link("History"))
    assert "subject: &quot;Ocjena: Matematika&quot; → &quot;Ocjena: Fizika&quot;" in history.text
    assert "extra.Site: &quot;x&quot; → &quot;y&quot;" in history.text


def test_save_and_retry_now_delivers_the_edited_message_once(admin_client) -> None:
    (key,) = park("typo'd address", username="ana@exmaple.org")
    page, form = edit_form(admin_client, key)
    done = page.press(admin_client, form, "Save and retry now", username="ana@example.org")
    assert "Retried 1 message(s): 1 delivered" in done.text
    assert [m.username for m in delivered] == ["ana@example.org"]
    assert table_rows() == []
    assert ArchivedMessage.objects.get(key=key).reason == "edited"
    assert done.url == CHANGELIST


def test_an_unchanged_form_writes_nothing(admin_client) -> None:
    (key,) = park("same", descriptions=[], extra={"N": 1.5})
    before = dict(table_rows())[key]
    page, form = edit_form(admin_client, key)
    done = page.press(admin_client, form, "Save")
    assert "Nothing changed" in done.text
    assert dict(table_rows())[key] == before
    assert not ArchivedMessage.objects.exists()


def test_lists_are_one_item_a_line(admin_client) -> None:
    (key,) = park("lists", descriptions=["a", "b"])
    page, form = edit_form(admin_client, key)
    assert page.fields(form)["descriptions"] == "a\nb"
    page.press(admin_client, form, "Save", descriptions="a\r\nc\r\n", skip_recipients="x")
    msg = codec.decode(dict(table_rows())[key])[0]
    assert (msg.descriptions, msg.fields, msg.skip_recipients) == (["a", "c"], None, ["x"])


@pytest.mark.parametrize(
    ("field", "text", "error"),
    [
        ("code", str(2**63), "less than or equal to"),
        ("timestamp", "yesterday", "Not an RFC 3339 time"),
        ("Site", "{not json", "Not JSON"),
        ("Site", "NaN", "is not JSON"),
        ("Site", '{"$map": [[1, "keyed by a number"]]}', "Go format cannot hold"),
    ],
)
def test_bad_values_are_form_errors_and_nothing_is_written(
    admin_client, field: str, text: str, error: str
) -> None:
    (key,) = park("guarded", extra={"Site": "x"})
    before = dict(table_rows())[key]
    page, form = edit_form(admin_client, key)
    name = field if field in ("code", "timestamp") else page.label_of(form, field)
    again = page.press(admin_client, form, "Save", **{name: text})
    assert "errorlist" in again.text and error in again.text, again.text
    assert dict(table_rows())[key] == before
    assert not ArchivedMessage.objects.exists()


def test_sealed_and_kept_keys_are_shown_read_only_and_say_why(admin_client) -> None:
    (key,) = park("task", extra={capture.TASK_ARGS: [1], "Attempts": 3})
    page, form = edit_form(admin_client, key)
    assert f"set by {capture.APP}, which seals it" in page.text
    assert "kept by the drain" in page.text
    assert "it anchors the age limit" in page.text
    disabled = {i["name"] for i in form["inputs"] if "disabled" in i}
    assert len(disabled) == 3  # first failure, TaskArgs, Attempts
    tampered = dict.fromkeys(disabled, "[2]")
    page.press(admin_client, form, "Save", subject="changed", **tampered)
    msg = codec.decode(dict(table_rows())[key])[0]
    assert (msg.subject, msg.extra) == ("changed", {capture.TASK_ARGS: [1], "Attempts": 3})


def test_an_edit_made_meanwhile_is_not_overwritten(admin_client) -> None:
    (key,) = park("first")
    page, form = edit_form(admin_client, key)
    value = dict(table_rows())[key]
    msg = codec.decode(value)[0]
    edits.edit_msg(
        key, msg.replace(subject="meanwhile"), expected=edits.etag_of(key, value), actor="x"
    )
    again = page.press(admin_client, form, "Save", subject="late")
    assert "changed since the form was opened" in again.text
    assert subject_of(key) == "meanwhile"
    assert FormPage(again.response).form_with("etag")  # the form again, as the row is now
    assert "meanwhile" in again.text


def test_no_edit_link_or_page_on_a_queue_not_editable(admin_client) -> None:
    (key,) = park("fixed", queue="fixed")
    message = open_page(admin_client, message_link(open_page(admin_client, CHANGELIST), key))
    assert "Edit" not in {label for label, _ in message.links}
    assert admin_client.get(f"{CHANGELIST}{key.hex()}/edit/").status_code == 403


def test_no_edit_link_or_page_without_the_change_permission(client: Client) -> None:
    (key,) = park("viewed")
    viewer = User.objects.create_user("viewer", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_queuedmessage"))
    client.force_login(viewer)
    message = open_page(client, message_link(open_page(client, CHANGELIST), key))
    assert "Edit" not in {label for label, _ in message.links}
    assert "Retry now" not in message.text  # the page as it was: view only
    assert client.get(f"{CHANGELIST}{key.hex()}/edit/").status_code == 403
    editor = User.objects.create_user("editor", is_staff=True)
    editor.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_queuedmessage", "change_queuedmessage"])
    )
    client.force_login(editor)
    page, form = edit_form(client, key)
    assert "Save and retry now" not in page.text  # retrying needs the drain permission
    page.press(client, form, "Save", subject="edited")
    assert subject_of(key) == "edited"
    assert QueuedMessage.objects.count() == 1


def test_a_list_with_an_item_a_line_cannot_show_is_a_json_array(admin_client) -> None:
    (key,) = park("a\nb", descriptions=["two\nlines", ""])
    page, form = edit_form(admin_client, key)
    assert page.fields(form)["descriptions"] == '["two\\nlines", ""]'
    assert "A JSON array of strings" in page.text
    page.press(
        admin_client, form, "Save", descriptions='["two\\nlines", "", "three"]', subject="a\r\nc"
    )
    msg = codec.decode(dict(table_rows())[key])[0]
    assert (msg.descriptions, msg.subject) == (["two\nlines", "", "three"], "a\nc")


def test_a_message_delivered_while_the_form_was_open_is_not_parked_again(admin_client) -> None:
    (key,) = park("delivered meanwhile")
    page, form = edit_form(admin_client, key)
    dequeue(key)
    done = page.press(admin_client, form, "Save", subject="late")
    assert "no longer parked" in done.text
    assert done.url == CHANGELIST
    assert table_rows() == []
    assert not ArchivedMessage.objects.exists()
