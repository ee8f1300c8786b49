"""The admin, used as an operator uses it: every URL a test requests is one a page
rendered (a link followed or a form submitted), so the pages' own URLs and forms
are what is tested."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin

import cbor2
import hypothesis
import pytest
import time_machine
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from hypothesis import strategies as st

from deadletter import signals
from deadletter.models import QueuedMessage
from deadletter.queue import fetch_failed_msgs, store_failed_msgs
from deadletter.wire import keys
from deadletter.wire.messages import Message
from tests.factories import insert
from tests.odd_rows import park_odd_rows
from tests.wire.test_jsonvalues import scalars as jsonvalues_scalars
from tests.wire.test_jsonvalues import values as jsonvalues_strategy

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/deadletter/queuedmessage/"


class Page(HTMLParser):
    """The links and forms of one HTML page, as a browser would see them."""

    def __init__(self, response: Any) -> None:
        super().__init__()
        self.response = response
        self.url = response.wsgi_request.get_full_path()
        self.links: list[tuple[str, str]] = []
        self.forms: list[dict[str, Any]] = []
        self.headers: list[str] = []
        self._link: list[str] | None = None
        self._th: list[str] | None = None
        self._href = ""
        self.feed(response.content.decode())

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "th" and a.get("scope") == "col":
            self._th = []
        if tag == "a" and "href" in a:
            self._link, self._href = [], a["href"]
        elif tag == "form":
            self.forms.append({"action": a.get("action") or self.url, "inputs": []})
        elif tag in ("input", "select", "button") and self.forms and "name" in a:
            self.forms[-1]["inputs"].append(a)

    def handle_data(self, data: str) -> None:
        if self._link is not None:
            self._link.append(data)
        if self._th is not None:
            self._th.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "th" and self._th is not None:
            self.headers.append(" ".join("".join(self._th).split()))
            self._th = None
        if tag == "a" and self._link is not None:
            self.links.append((" ".join("".join(self._link).split()), self._href))
            self._link = None

    @property
    def text(self) -> str:
        return self.response.content.decode()

    def link(self, text: str) -> str:
        """The href of the link whose text is `text` (one place it leads, however
        often the page shows it: the message page has its buttons above and below)."""
        found = sorted({href for label, href in self.links if label == text})
        assert len(found) == 1, f"{len(found)} links {text!r} on {self.url}: {self.links}"
        return urljoin(self.url, found[0])

    def links_under(self, prefix: str) -> list[str]:
        return [href for _, href in self.links if href.startswith(prefix)]

    def form_with(self, name: str) -> dict[str, Any]:
        (form,) = [f for f in self.forms if any(i["name"] == name for i in f["inputs"])]
        return form

    def submit(
        self, client: Any, form: dict[str, Any], *, check: list[str] | None = None, **fields: str
    ) -> Page:
        """POST `form` as a browser would on its first submit button: its hidden and
        text inputs, the checkboxes already ticked plus those whose values are in
        `check`, overridden by `fields`."""
        data: dict[str, list[str]] = {}
        clicked = False
        for i in form["inputs"]:
            kind = i.get("type", "text")
            if kind in ("submit", "button"):
                if not clicked and kind == "submit":
                    data.setdefault(i["name"], []).append(i.get("value", ""))
                clicked = True
                continue
            if kind == "checkbox" and not ("checked" in i or i.get("value") in (check or [])):
                continue
            data.setdefault(i["name"], []).append(i.get("value", ""))
        for name, value in fields.items():
            data[name] = [value]
        return Page(client.post(form["action"], data, follow=True))


def page_keys(form: dict[str, Any]) -> list[str]:
    """Every row checkbox of a changelist form: what "select all" ticks in a browser."""
    return [i["value"] for i in form["inputs"] if i["name"] == "_selected_action"]


def open_page(client: Any, url: str, **params: str) -> Page:
    response = client.get(url, params, follow=True)
    assert response.status_code == 200, (url, response.status_code)
    return Page(response)


def opened(client: Any, url: str, **params: str) -> tuple[Page, int]:
    """`open_page`, and how many statements it ran."""
    with CaptureQueriesContext(connection) as ctx:
        page = open_page(client, url, **params)
    return page, len(ctx.captured_queries)


@pytest.fixture
def dequeued() -> Any:
    """Keys `message_dequeued` was sent for during the test."""
    seen: list[bytes] = []

    def receiver(sender: str, key: bytes, **kwargs: Any) -> None:
        seen.append(key)

    signals.message_dequeued.connect(receiver, weak=False, dispatch_uid="test-admin")
    yield seen
    signals.message_dequeued.disconnect(dispatch_uid="test-admin")


def message_link(page: Page, key: bytes) -> str:
    """The changelist's link to the row `key` (the link a click would follow)."""
    found = [h for h in page.links_under(CHANGELIST) if keys.to_text(key) in h]
    assert len(found) == 1, found
    return found[0]


def test_every_admin_url_carries_the_key_as_lowercase_hex(admin_client) -> None:
    key = store_failed_msgs("q", Message(subject="linked"))
    listing = open_page(admin_client, CHANGELIST)
    assert message_link(listing, key) == f"{CHANGELIST}{key.hex()}/change/"
    assert f'value="{key.hex()}"' in listing.text  # the action checkbox
    page = open_page(admin_client, message_link(listing, key))
    assert page.link("Delete") == f"{CHANGELIST}{key.hex()}/delete/"
    assert page.link("History") == f"{CHANGELIST}{key.hex()}/history/"


@pytest.mark.django_db(transaction=True)
def test_the_delete_button_deletes_through_dequeue(admin_client, dequeued) -> None:
    key = store_failed_msgs("q", Message(subject="gone"))
    store_failed_msgs("q", Message(subject="kept"))
    page = open_page(admin_client, message_link(open_page(admin_client, CHANGELIST), key))
    confirm = open_page(admin_client, page.link("Delete"))
    done = confirm.submit(admin_client, confirm.form_with("post"))
    assert "was deleted successfully" in done.text
    assert [q.msg.subject for q in fetch_failed_msgs("q")] == ["kept"]
    assert dequeued == [key]
    entry = LogEntry.objects.get(action_flag=DELETION)
    assert entry.object_id == key.hex()


def test_history_opens_and_shows_the_deletion_logged_under_the_hex_key(admin_client) -> None:
    key = store_failed_msgs("q", Message(subject="watched"))
    store_failed_msgs("q", Message(subject="other"))
    page = open_page(admin_client, message_link(open_page(admin_client, CHANGELIST), key))
    history = open_page(admin_client, page.link("History"))
    assert "watched" in history.text or key.hex() in history.text
    confirm = open_page(admin_client, page.link("Delete"))
    confirm.submit(admin_client, confirm.form_with("post"))
    assert LogEntry.objects.filter(object_id=key.hex(), action_flag=DELETION).count() == 1


@pytest.mark.django_db(transaction=True)
def test_bulk_delete_confirmation_deletes_exactly_the_chosen_rows(admin_client, dequeued) -> None:
    stored = [store_failed_msgs("q", Message(subject=f"m{i}")) for i in range(4)]
    chosen = [stored[0], stored[2]]
    listing = open_page(admin_client, CHANGELIST)
    form = listing.form_with("_selected_action")
    confirm = listing.submit(
        admin_client, form, check=[k.hex() for k in chosen], action="delete_selected"
    )
    assert sorted(
        i["value"] for i in confirm.form_with("post")["inputs"] if i["name"] == "_selected_action"
    ) == sorted(k.hex() for k in chosen)
    done = confirm.submit(admin_client, confirm.form_with("post"))
    assert "Successfully deleted 2" in done.text
    assert [q.msg.subject for q in fetch_failed_msgs("q")] == ["m1", "m3"]
    assert sorted(dequeued) == sorted(chosen)


def test_rows_with_odd_keys_and_values_open_and_delete(admin_client) -> None:
    odd = park_odd_rows("q")
    listing = open_page(admin_client, CHANGELIST)
    for key in odd:
        page = open_page(admin_client, message_link(listing, key))
        confirm = open_page(admin_client, page.link("Delete"))
        confirm.submit(admin_client, confirm.form_with("post"))
        assert not QueuedMessage.objects.filter(key=key).exists()


@pytest.mark.parametrize(
    "query",
    [
        {"key__gt": "00"},
        {"key__gt": "zz"},
        {"key__in": "0,1"},
        {"value__contains": "x"},
        {"key__regex": "("},
        {"queue": "\x00"},
        {"after": "zz"},
        {"before": "0"},
        {"p": "-1"},
        {"o": "9"},
    ],
)
def test_odd_changelist_queries_never_answer_500(admin_client, query) -> None:
    store_failed_msgs("q", Message(subject="x"))
    response = admin_client.get(CHANGELIST, query, follow=True)
    assert response.status_code < 500


# --- the changelist -------------------------------------------------------------


def test_changelist_lists_messages_in_parked_order_with_their_columns(admin_client) -> None:
    store_failed_msgs("q", Message(subject="first", username="ana@skole.hr"))
    store_failed_msgs("q", Message(subject="second"))
    page = open_page(admin_client, CHANGELIST)
    assert page.text.index("first") < page.text.index("second")
    assert re.search(r"\d{1,2}:\d{2}:\d{2}\xa0[ap]\.m\.|\d{1,2}:\d{2}:\d{2} [ap]\.m\.", page.text)
    for title in (
        "Parked (by queue, oldest first)",
        "Queue",
        "Subject",
        "Recipient",
        "Code",
        "First failure",
        "Age",
        "Expires in",
        "Attempts",
        "Last error",
    ):
        assert title in page.headers, title
    assert "ana@skole.hr" in page.text
    assert "4\xa0weeks" in page.text  # time left before the 30-day age limit


def test_changelist_renders_first_failure_as_django_renders_datetimes(
    admin_client, settings
) -> None:
    from datetime import UTC, datetime

    from django.utils import formats

    when = datetime(2026, 11, 30, 10, 27, 43, 547857, tzinfo=UTC)
    store_failed_msgs("q", Message(subject="timed", queued_at=when))
    page = open_page(admin_client, CHANGELIST)
    assert formats.localize(when) in page.text
    assert "2026-11-30T10:27:43" not in page.text


def test_pages_go_by_key_with_next_and_previous_and_never_count(
    admin_client, django_assert_max_num_queries, settings
) -> None:
    from django.test.utils import CaptureQueriesContext

    stored = [store_failed_msgs("q", Message(subject=f"m{i:03d}")) for i in range(120)]
    with CaptureQueriesContext(connection) as ctx:
        first = open_page(admin_client, CHANGELIST)
    counts = [q["sql"] for q in ctx.captured_queries if "COUNT(" in q["sql"].upper()]
    assert not [q for q in counts if "GROUP BY" not in q]  # only the causes are counted
    assert "m000" in first.text and "m049" in first.text and "m050" not in first.text
    second = open_page(admin_client, first.link("next ›"))
    assert "m050" in second.text and "m099" in second.text and "m049" not in second.text
    third = open_page(admin_client, second.link("next ›"))
    assert "m119" in third.text
    assert not [h for label, h in third.links if label == "next ›"]
    back = open_page(admin_client, third.link("‹ previous"))
    assert "m050" in back.text and "m099" in back.text
    assert len(stored) == 120


def test_list_pages_ask_the_same_few_queries_for_any_number_of_rows_and_queues(
    admin_client,
) -> None:
    """Queues, causes and rows are each one statement; nothing counts the table."""

    def queries(url: str) -> list[str]:
        with CaptureQueriesContext(connection) as ctx:
            open_page(admin_client, url)
        return [q["sql"] for q in ctx.captured_queries]

    def asked(url: str) -> int:
        found = queries(url)
        assert not [q for q in found if "COUNT(" in q.upper() and "WHERE" not in q.upper()]
        return len(found)

    QueuedMessage.objects.create(key=keys.new_key("q00"), value=b"\xa0", signature="E0: x")
    small = {url: asked(url) for url in (CHANGELIST, CHANGELIST + "?queue=q00", OVERVIEW)}
    for i in range(12):
        for j in range(10):
            QueuedMessage.objects.create(
                key=keys.new_key(f"q{i:02d}"), value=b"\xa0", signature=f"E{j % 3}: x"
            )
    listing = open_page(admin_client, CHANGELIST)
    for url in (CHANGELIST, listing.link("q03"), listing.link("next ›"), OVERVIEW):
        assert asked(url) <= small.get(url, small[CHANGELIST]), url
    assert not [q for q in queries(CHANGELIST) if "COUNT(" in q.upper()]


def test_queue_filter_lists_queues_and_shows_only_the_chosen_one(admin_client) -> None:
    store_failed_msgs("telegram-queue", Message(subject="in telegram"))
    store_failed_msgs("discord-queue", Message(subject="in discord"))
    listing = open_page(admin_client, CHANGELIST)
    body = open_page(admin_client, listing.link("discord-queue")).text
    assert "in discord" in body
    assert "in telegram" not in body


def test_a_queue_chosen_from_a_later_page_opens_at_its_first_row(admin_client) -> None:
    for i in range(60):
        store_failed_msgs("b", Message(subject=f"b{i:03d}"))
    store_failed_msgs("a", Message(subject="in a"))
    second = open_page(admin_client, open_page(admin_client, CHANGELIST).link("next ›"))
    assert "in a" not in second.text
    assert "in a" in open_page(admin_client, second.link("a")).text
    assert "b000" in open_page(admin_client, second.link("b")).text


def test_rows_cannot_be_added_or_edited(admin_client) -> None:
    assert admin_client.get(reverse("admin:deadletter_queuedmessage_add")).status_code == 403


# --- the message page ----------------------------------------------------------


def test_message_page_labels_every_field(admin_client) -> None:
    key = store_failed_msgs(
        "q",
        Message(
            subject="Ocjena: Matematika",
            username="ana@skole.hr",
            fields=["Matematika", "5"],
            extra={"Attempts": 3, "LastError": "ConnectionError: down", "Score": 4.5},
        ),
    )
    page = open_page(admin_client, message_link(open_page(admin_client, CHANGELIST), key))
    text = page.text
    assert "Ocjena: Matematika" in text
    assert "<li>Matematika</li><li>5</li>" in text  # a list as a list
    assert ">skip recipients</th><td>—</td>" in text  # none as a dash
    assert '<code class="dl-key-name">Score</code>' in text and "4.5" in text
    assert ">attempts</th><td>3</td>" in text
    assert "ConnectionError: down" in text
    assert key.hex() in text and "seq" in text and "bytes (key and value)" in text
    assert "None" not in text.split('id="content"')[1]


def test_message_page_of_a_corrupt_row_says_so(admin_client) -> None:
    key = keys.new_key("q")
    QueuedMessage.objects.create(key=key, value=b"corrupted cbor data")
    page = open_page(admin_client, message_link(open_page(admin_client, CHANGELIST), key))
    assert "corrupt row" in page.text


def test_a_row_over_the_size_limit_is_listed_shown_as_too_large_and_deletes(
    admin_client, settings
) -> None:
    key = store_failed_msgs("q", Message(subject="big", fields=["x" * 5000]))
    settings.DEADLETTER_MAX_ROW_BYTES = 1000
    listing = open_page(admin_client, CHANGELIST)
    page = open_page(admin_client, message_link(listing, key))
    assert "too large to show" in page.text and "DEADLETTER_MAX_ROW_BYTES" in page.text
    assert "x" * 100 not in page.text  # never decoded
    confirm = open_page(admin_client, page.link("Delete"))
    confirm.submit(admin_client, confirm.form_with("post"))
    assert not QueuedMessage.objects.filter(key=key).exists()


def test_a_key_that_is_not_hex_is_not_found(admin_client) -> None:
    page = open_page(admin_client, f"{CHANGELIST}zz-not-hex/change/")
    assert "doesn’t exist" in page.text or "doesn't exist" in page.text


@pytest.mark.django_db(transaction=True)
def test_retry_now_on_the_message_page_delivers_it(admin_client, settings) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.ok_handler"}
    key = store_failed_msgs("q", Message(subject="retry me"))
    page = open_page(admin_client, message_link(open_page(admin_client, CHANGELIST), key))
    (button,) = [i for f in page.forms for i in f["inputs"] if False] or [None]
    assert 'formaction="' in page.text and "Retry now" in page.text
    action = page.text.split('formaction="')[1].split('"')[0]
    form = page.forms[0]
    done = page.submit(admin_client, {**form, "action": action})
    assert "1 delivered" in done.text
    assert fetch_failed_msgs("q") == []
    assert button is None


@pytest.mark.django_db
def test_retry_now_of_a_message_already_gone_says_so_and_goes_to_the_admin_index(
    admin_client,
) -> None:
    gone = keys.new_key("q").hex()
    response = admin_client.post(f"{CHANGELIST}{gone}/retry/", follow=True)
    assert response.redirect_chain == [(reverse("admin:index"), 302)]
    assert f"with ID “{gone}” doesn’t exist" in response.content.decode()


# --- actions ---------------------------------------------------------------------


def retry(admin_client, *chosen: bytes) -> Page:
    listing = open_page(admin_client, CHANGELIST)
    form = listing.form_with("_selected_action")
    return listing.submit(admin_client, form, check=[k.hex() for k in chosen], action="retry_now")


@pytest.mark.django_db(transaction=True)
def test_retry_now_delivers_the_selected_rows_only(admin_client, settings) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.ok_handler"}
    chosen = store_failed_msgs("q", Message(subject="chosen"))
    store_failed_msgs("q", Message(subject="left alone"))
    page = retry(admin_client, chosen)
    assert "1 delivered" in page.text
    assert [q.msg.subject for q in fetch_failed_msgs("q")] == ["left alone"]


@pytest.mark.django_db(transaction=True)
def test_retry_now_records_the_failure_and_its_cause_on_the_row(admin_client, settings) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.failing_handler"}
    key = store_failed_msgs("q", Message(subject="still failing"))
    page = retry(admin_client, key)
    assert "1 still failing" in page.text
    (item,) = fetch_failed_msgs("q")
    assert item.msg.extra["Attempts"] == 1
    assert (
        "ConnectionError: timeout after 30 s talking to 10.0.0.7:8443"
        in item.msg.extra["LastError"]
    )
    row = QueuedMessage.objects.get(key=key)
    assert row.signature == "ConnectionError: timeout after # s talking to #"


@pytest.mark.django_db(transaction=True)
def test_retry_now_without_a_handler_says_why(admin_client, settings) -> None:
    settings.DEADLETTER_HANDLERS = {}
    key = store_failed_msgs("q", Message(subject="no handler"))
    page = retry(admin_client, key)
    assert "handler" in page.text
    assert len(fetch_failed_msgs("q")) == 1


@pytest.mark.django_db(transaction=True)
def test_select_all_matching_then_delete_works_in_chunks(
    admin_client, settings, monkeypatch
) -> None:
    from deadletter.admin import bulk

    monkeypatch.setattr(bulk, "CHUNK", 7)
    for i in range(60):
        store_failed_msgs("q", Message(subject=f"d{i}"))
    store_failed_msgs("other", Message(subject="kept"))
    listing = open_page(admin_client, CHANGELIST, queue="q")
    assert "Select all messages matching this filter" in listing.text
    form = listing.form_with("_selected_action")
    confirm = listing.submit(
        admin_client, form, check=page_keys(form), action="delete_selected", select_across="1"
    )
    assert "every message matching the current filter" in confirm.text
    done = confirm.submit(admin_client, confirm.form_with("post"))
    assert "Successfully deleted 60" in done.text
    assert QueuedMessage.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_bulk_retry_stops_after_the_time_budget_and_says_what_is_left(
    admin_client, settings
) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.ok_handler"}
    settings.DEADLETTER_ADMIN_TIME_BUDGET = 0
    for i in range(60):
        store_failed_msgs("q", Message(subject=f"r{i}"))
    listing = open_page(admin_client, CHANGELIST, queue="q")
    form = listing.form_with("_selected_action")
    confirm = listing.submit(
        admin_client, form, check=page_keys(form), action="retry_now", select_across="1"
    )
    page = confirm.submit(admin_client, confirm.form_with("post"))
    assert "60 selected message(s) left for deadletter_drain" in page.text
    assert QueuedMessage.objects.count() == 60


# --- the queue overview ---------------------------------------------------------

OVERVIEW = "/admin/deadletter/queuedmessage/overview/"


def test_overview_is_linked_from_the_app_index_and_shows_each_queue(admin_client) -> None:
    from datetime import UTC, datetime, timedelta

    old = datetime.now(UTC) - timedelta(days=29, hours=12)
    store_failed_msgs("telegram-queue", Message(subject="old", queued_at=old))
    store_failed_msgs("telegram-queue", Message(subject="new"))
    QueuedMessage.objects.create(key=b"discord-queue", value=b"\x80")  # a legacy row
    app = open_page(admin_client, "/admin/deadletter/")
    page = open_page(admin_client, app.link("Queue overview"))
    assert page.url == OVERVIEW
    assert "telegram-queue" in page.text and "discord-queue" in page.text
    assert "4\xa0weeks" in page.text  # the age of the oldest first failure


@pytest.mark.django_db(transaction=True)
def test_overview_shows_what_each_queue_dropped_so_far(admin_client) -> None:
    from datetime import UTC, datetime, timedelta

    store_failed_msgs(
        "q", Message(subject="expired", queued_at=datetime.now(UTC) - timedelta(days=31))
    )
    store_failed_msgs("q", Message(subject="live"))
    fetch_failed_msgs("q")  # the age limit drops the expired one, and counts it
    page = open_page(admin_client, OVERVIEW)
    assert "dropped so far" in page.text
    assert "expired 1" in page.text


@pytest.mark.django_db(transaction=True)
def test_overview_groups_failures_by_cause_and_links_the_cause_filter(
    admin_client, settings
) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.failing_handler"}
    failing = [store_failed_msgs("q", Message(subject=f"f{i}")) for i in range(3)]
    store_failed_msgs("q", Message(subject="never tried"))
    retry(admin_client, *failing)
    page = open_page(admin_client, OVERVIEW)
    cause = [label for label, _ in page.links if label.startswith("3 × ConnectionError")]
    assert cause, page.links
    listing = open_page(admin_client, page.link(cause[0]))
    assert all(f"f{i}" in listing.text for i in range(3))
    assert "never tried" not in listing.text


@pytest.mark.django_db(transaction=True)
def test_drain_from_the_overview_goes_through_a_confirmation(admin_client, settings) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.ok_handler"}
    for i in range(5):
        store_failed_msgs("q", Message(subject=f"d{i}"))
    overview = open_page(admin_client, OVERVIEW)
    confirm = open_page(admin_client, overview.link("Drain"))
    form = confirm.form_with("limit")
    done = confirm.submit(admin_client, form, limit="3", queue="q")
    assert "Drained 3 message(s): 3 delivered" in done.text
    assert [q.msg.subject for q in fetch_failed_msgs("q")] == ["d3", "d4"]


@pytest.mark.django_db(transaction=True)
def test_purge_expired_drops_only_expired_messages(admin_client) -> None:
    from datetime import UTC, datetime, timedelta

    long_ago = datetime.now(UTC) - timedelta(days=40)
    old_key = keys.make_key("q", int(long_ago.timestamp()) * 1_000_000_000, 1)
    from deadletter.wire import codec

    QueuedMessage.objects.create(
        key=old_key, value=codec.encode_one(Message(subject="old", queued_at=long_ago))
    )
    store_failed_msgs("q", Message(subject="fresh"))
    overview = open_page(admin_client, OVERVIEW)
    confirm = open_page(admin_client, overview.link("Purge expired"))
    done = confirm.submit(admin_client, confirm.forms[-1])
    assert "Purged 1 expired message(s)." in done.text
    assert [q.msg.subject for q in fetch_failed_msgs("q")] == ["fresh"]


def test_drain_and_purge_are_refused_without_the_permission(client, django_user_model) -> None:
    from django.contrib.auth.models import Permission

    user = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_queuedmessage"))
    client.login(username="viewer", password="pw")
    store_failed_msgs("q", Message(subject="x"))
    page = open_page(client, OVERVIEW)
    assert "Drain" not in [label for label, _ in page.links]
    for url in (OVERVIEW + "drain/", OVERVIEW + "purge/"):
        assert client.get(url).status_code == 403
        assert client.post(url, {"limit": "1"}).status_code == 403
    assert len(fetch_failed_msgs("q")) == 1


# A fresh client and row per example, so the function-scoped db fixture is safe.
RENDERING = hypothesis.settings(
    max_examples=60 * hypothesis.settings.default.max_examples // 100,
    deadline=None,
    suppress_health_check=[
        hypothesis.HealthCheck.function_scoped_fixture,
        hypothesis.HealthCheck.too_slow,
    ],
)


@pytest.mark.django_db(transaction=True)
@RENDERING
@hypothesis.given(value=jsonvalues_strategy(jsonvalues_scalars))
def test_any_stored_value_renders_in_the_list_and_on_the_message_page(value: Any) -> None:
    """A row as another writer may have stored it: any CBOR in an unknown key."""
    client = Client()
    user, _ = User.objects.get_or_create(username="root", is_superuser=True, is_staff=True)
    client.force_login(user)
    key = keys.new_key("values")
    QueuedMessage.objects.create(key=key, value=cbor2.dumps([{"Subject": "s", "Value": value}]))
    try:
        listing = open_page(client, CHANGELIST)
        page = open_page(client, message_link(listing, key))
        assert 'dl-key-name">Value</code>' in page.text or "corrupt row" in page.text, repr(value)
    finally:
        QueuedMessage.objects.filter(key=key).delete()


# --- times no datetime can hold, as another writer may store them -----------------


def go_text(
    year: int, month: int, day: int, hour: int, minute: int, second: int, nanos: int, offset: int
) -> str:
    """RFC 3339 as Go writes it; `offset` in minutes east of UTC, Go's bounds ±24:00."""
    fraction = f".{nanos:09d}".rstrip("0") if nanos else ""
    zone = (
        "Z"
        if offset == 0
        else f"{'-' if offset < 0 else '+'}{abs(offset) // 60:02d}:{abs(offset) % 60:02d}"
    )
    return f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}{fraction}{zone}"


GO_TIMES = st.one_of(
    st.none(),
    st.sampled_from(
        [
            "0000-01-01T00:00:00+24:00",
            "0001-01-01T00:00:00.000000001+23:59",
            "9999-12-15T00:00:00Z",
            "9999-12-31T23:59:59.999999999-23:59",
            "9999-12-31T23:59:59.999999999-24:00",
        ]
    ),
    st.builds(
        go_text,
        st.one_of(st.sampled_from([0, 1, 9999]), st.integers(0, 9999)),
        st.integers(1, 12),
        st.integers(1, 28),
        st.integers(0, 23),
        st.integers(0, 59),
        st.integers(0, 59),
        st.one_of(st.just(0), st.integers(0, 999_999_999)),
        st.integers(-24 * 60, 24 * 60),
    ),
    # An epoch, as Go also reads a time: years 0000 to 9999.
    st.integers(-62_167_219_200, 253_402_300_799).map(lambda seconds: cbor2.CBORTag(1, seconds)),
)


def park_go_row(
    queued_at: Any, timestamp: Any = None, key_ns: int | None = None, **extra: Any
) -> bytes:
    """A row as the Go program (or raw SQL) writes it, below the store's checks."""
    key = keys.new_key("far") if key_ns is None else keys.make_key("far", key_ns, 1)
    value = cbor2.dumps(
        [{"Timestamp": timestamp, "QueuedAt": queued_at, "Subject": "far", **extra}]
    )
    insert(key, value)
    return key


def three_pages(client: Any, key: bytes) -> tuple[Page, Page, Page]:
    """The list, the row's message page and the overview, reached by links from the index."""
    listing = open_page(client, open_page(client, "/admin/").link("Queued messages"))
    page = open_page(client, message_link(listing, key))
    overview = open_page(client, open_page(client, "/admin/deadletter/").link("Queue overview"))
    return listing, page, overview


@pytest.mark.parametrize("zone", ["UTC", "Pacific/Kiritimati", "Etc/GMT+12"])
@pytest.mark.parametrize(
    ("queued_at", "age", "as_written"),
    [
        ("9999-12-15T00:00:00Z", "in the future", False),
        ("9999-12-31T23:59:59.999999999-23:59", "in the future", True),  # in year 10000 UTC
        ("9999-12-31T23:00:00-24:00", "in the future", True),
        ("0001-01-01T00:00:01+23:59", "2025\xa0years", True),  # in year 0 UTC
        ("0000-06-01T00:00:00Z", "2026\xa0years", True),
        (cbor2.CBORTag(1, 253402300799), "in the future", False),  # epoch of 9999-12-31T23:59:59Z
    ],
)
def test_a_far_off_first_failure_shows_on_the_list_the_message_page_and_the_overview(
    admin_client, settings, zone: str, queued_at: Any, age: str, as_written: bool
) -> None:
    settings.TIME_ZONE = zone
    key = park_go_row(queued_at, timestamp=queued_at, key_ns=2**64 - 1)
    with time_machine.travel("2026-12-01T12:00:00Z", tick=False):
        listing, page, overview = three_pages(admin_client, key)
    assert age in listing.text
    assert ("expired" if "years" in age else "7973\xa0years") in listing.text
    if age == "in the future":
        assert overview.text.count("in the future") == 2  # parked in 2554, and failed
    else:
        assert f"{age} ago" in overview.text
    if as_written:
        for shown in (listing, page, overview):
            assert queued_at in shown.text
    assert "parked" in page.text and "2554" in page.text  # the last key time there is


@pytest.mark.django_db(transaction=True)
@RENDERING
@hypothesis.given(
    queued_at=GO_TIMES,
    timestamp=GO_TIMES,
    key_ns=st.one_of(st.none(), st.sampled_from([0, 2**63, 2**64 - 1]), st.integers(0, 2**64 - 1)),
    zone=st.sampled_from(["UTC", "Pacific/Kiritimati", "Etc/GMT+12", "America/St_Johns"]),
    value=jsonvalues_strategy(jsonvalues_scalars),
)
def test_any_time_and_value_renders_on_the_list_the_message_page_and_the_overview(
    queued_at: Any, timestamp: Any, key_ns: int | None, zone: str, value: Any
) -> None:
    """Times of any year Go writes (0 to 9999, offsets to ±24:00, epochs) beside any
    value the API can show, in zones either side of UTC."""
    client = Client()
    user, _ = User.objects.get_or_create(username="root", is_superuser=True, is_staff=True)
    client.force_login(user)
    key = park_go_row(queued_at, timestamp=timestamp, key_ns=key_ns, Value=value)
    try:
        with timezone.override(zone):
            _, page, overview = three_pages(client, key)
        assert "first failure (queued at)" in page.text or "corrupt row" in page.text
        assert "far" in overview.text
    finally:
        QueuedMessage.objects.filter(key=key).delete()


# --- backoff and breaker, as the operator sees them -------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_waiting_message_shows_when_it_is_due_and_the_overview_a_paused_queue(
    admin_client, settings
) -> None:
    from deadletter.drain import Drainer

    settings.DEADLETTER_HANDLERS = {
        "hooks": {
            "handler": "tests.factories.failing_handler",
            "backoff": [3600, 3600],
            "breaker": 1,
        }
    }
    store_failed_msgs("hooks", Message(subject="down"))
    store_failed_msgs("hooks", Message(subject="untouched"))
    Drainer().run()
    app = open_page(admin_client, "/admin/deadletter/")
    changelist = open_page(admin_client, app.link("Queued messages"))
    assert len(re.findall(r"waits (\d+\xa0minutes|1\xa0hour)", changelist.text)) == 1
    row = [href for _, href in changelist.links if "/change/" in href][0]
    message = open_page(admin_client, urljoin(changelist.url, row))
    assert "Next due" in message.text
    overview = open_page(admin_client, app.link("Queue overview"))
    assert "waiting" in overview.headers
    assert 'class="dl-paused"' in overview.text


def test_an_event_code_shows_as_its_number_unless_the_project_names_it(
    admin_client, settings
) -> None:
    store_failed_msgs("q", Message(subject="coded", code=3))
    settings.DEADLETTER_EVENT_CODES = {}
    listed = open_page(admin_client, CHANGELIST)
    assert "FINAL" not in listed.text and '<td class="field-code">3</td>' in listed.text
    row = [href for _, href in listed.links if "/change/" in href][0]
    page = open_page(admin_client, urljoin(listed.url, row))
    assert "FINAL_GRADE" not in page.text
    settings.DEADLETTER_EVENT_CODES = {3: "ORDER_SHIPPED"}
    listed = open_page(admin_client, CHANGELIST)
    assert "ORDER_<wbr>SHIPPED" in listed.text
    assert "ORDER_SHIPPED" in open_page(admin_client, urljoin(listed.url, row)).text


# --- what operators did, in History and Recent actions ------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_retry_from_the_message_page_is_in_its_history_with_its_outcome(
    admin_client, settings
) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.failing_handler"}
    key = store_failed_msgs("q", Message(subject="still failing"))
    page = open_page(admin_client, message_link(open_page(admin_client, CHANGELIST), key))
    action = page.text.split('formaction="')[1].split('"')[0]
    back = page.submit(admin_client, {**page.forms[0], "action": action})
    history = open_page(admin_client, back.link("History"))
    assert "Retried: failed: ConnectionError: timeout after 30 s" in history.text
    assert key.hex() in open_page(admin_client, "/admin/").text  # in Recent actions


@pytest.mark.django_db(transaction=True)
def test_a_retry_action_logs_each_row_with_its_outcome(admin_client, settings) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.ok_handler"}
    first = store_failed_msgs("q", Message(subject="one"))
    second = store_failed_msgs("q", Message(subject="two"))
    retry(admin_client, first, second)
    logged = LogEntry.objects.order_by("pk")
    assert [(e.object_id, e.get_change_message()) for e in logged] == [
        (first.hex(), "Retried: delivered"),
        (second.hex(), "Retried: delivered"),
    ]
    assert first.hex() in open_page(admin_client, "/admin/").text  # Recent actions


def test_deleting_from_a_message_page_returns_to_the_filtered_list(admin_client) -> None:
    key = store_failed_msgs("telegram-queue", Message(subject="to delete"))
    store_failed_msgs("sms-queue", Message(subject="other"))
    listing = open_page(admin_client, CHANGELIST, queue="telegram-queue")
    page = open_page(admin_client, message_link(listing, key))
    confirm = open_page(admin_client, page.link("Delete"))
    done = confirm.submit(admin_client, confirm.form_with("post"))
    assert done.url.startswith(CHANGELIST) and "queue=telegram-queue" in done.url
    assert "to delete" not in done.text and "was deleted successfully" in done.text


def test_the_message_page_shows_the_key_once_with_its_time_and_sequence(admin_client) -> None:
    key = store_failed_msgs("q", Message(subject="keyed"))
    page = open_page(admin_client, message_link(open_page(admin_client, CHANGELIST), key))
    field = page.text.split('class="dl-key"')[1]
    assert field.startswith(f">{key.hex()}</code>")
    assert "sequence number" in field and " ns)" not in page.text
    assert (
        page.text.count(key.hex()) == page.text.count(f"/{key.hex()}/") + 1
    )  # URLs, and once shown
    assert page.text.index('value="Retry now"') < page.text.index("Messages:")


def test_overview_pages_its_queues_by_name_and_costs_the_same_at_3000_queues(
    admin_client,
) -> None:
    """A page of the overview is a fixed number of statements and rows, however many
    queue names clients have made; its links walk every queue once, both ways."""
    from deadletter.admin.overview import QUEUES_PER_PAGE
    from tests.reports.many_queues import park_one_row_queues

    names = park_one_row_queues(QUEUES_PER_PAGE + 10)
    small, small_queries = opened(admin_client, OVERVIEW)
    park_one_row_queues(3000, prefix="spam-x")
    big, big_queries = opened(admin_client, OVERVIEW)
    assert big_queries == small_queries
    rows = 'scope="row" class="dl-name"'
    assert big.text.count(rows) == small.text.count(rows) == QUEUES_PER_PAGE
    assert "All queues: 3,060 row(s)" in big.text
    following = open_page(admin_client, small.link(f"next {QUEUES_PER_PAGE}"))
    assert (
        names[QUEUES_PER_PAGE] in following.text
        and names[QUEUES_PER_PAGE - 1] not in following.text
    )
    back = open_page(admin_client, following.link(f"previous {QUEUES_PER_PAGE}"))
    assert names[0] in back.text and names[QUEUES_PER_PAGE - 1] in back.text
    assert names[QUEUES_PER_PAGE] not in back.text
    assert open_page(admin_client, following.link("first page")).url == OVERVIEW


def test_overview_names_the_parked_queues_no_handler_delivers(admin_client, settings) -> None:
    settings.DEADLETTER_HANDLERS = {"served": "tests.factories.ok_handler"}
    store_failed_msgs("served", Message(subject="a"))
    store_failed_msgs("orphan", Message(subject="b"))
    store_failed_msgs("deadletter.alerts", Message(subject="an alert not sent"))  # built in
    page = open_page(admin_client, "/admin/deadletter/")
    page = open_page(admin_client, page.link("Queue overview"))
    warning = page.text.split('id="dl-no-handler"', 1)[1].split("</li>", 1)[0]
    assert "orphan" in warning and "served" not in warning and "deadletter.alerts" not in warning
    assert page.text.count(">no handler</span>") == 1
    listing = open_page(admin_client, page.link("orphan"))
    assert "b" in listing.text


@pytest.mark.django_db(transaction=True)
def test_purge_takes_a_typed_queue_and_its_page_does_not_grow_with_the_queues(
    admin_client,
) -> None:
    from datetime import UTC, datetime, timedelta

    from deadletter.wire import codec
    from tests.reports.many_queues import park_one_row_queues

    long_ago = datetime.now(UTC) - timedelta(days=40)
    for name in ("a", "b"):
        QueuedMessage.objects.create(
            key=keys.make_key(name, int(long_ago.timestamp()) * 1_000_000_000, 1),
            value=codec.encode_one(Message(subject="old", queued_at=long_ago)),
        )
    overview = open_page(admin_client, OVERVIEW)
    few = open_page(admin_client, overview.link("Purge expired"))
    park_one_row_queues(3000)
    many = open_page(admin_client, overview.link("Purge expired"))
    assert len(many.text) == len(few.text)
    done = many.submit(admin_client, many.forms[-1], queue="a")
    assert "Purged 1 expired message(s)." in done.text
    assert QueuedMessage.objects.filter(key__gte=b"b", key__lt=b"b\x01").count() == 1


def queue_filter(page: Page) -> str:
    """The queue filter's part of a changelist page."""
    return page.text.split('data-filter-title="queue"', 1)[1].split("</details>", 1)[0]


def test_changelist_queue_filter_costs_the_same_at_3000_queues_and_takes_a_typed_queue(
    admin_client,
) -> None:
    """The filter lists the first queues by name in one statement however many there
    are, says there are more, and reaches any other queue by its typed name."""
    from urllib.parse import urlsplit

    from deadletter.admin.changelist import MAX_QUEUES_LISTED
    from tests.reports.many_queues import park_one_row_queues

    names = park_one_row_queues(MAX_QUEUES_LISTED + 1)
    small, small_queries = opened(admin_client, CHANGELIST)
    park_one_row_queues(3000, prefix="spam-x")
    big, big_queries = opened(admin_client, CHANGELIST)
    assert big_queries == small_queries
    assert queue_filter(big) == queue_filter(small)
    assert 'id="dl-more-queues"' in queue_filter(big)
    assert names[MAX_QUEUES_LISTED - 1] in queue_filter(big)
    assert names[MAX_QUEUES_LISTED] not in queue_filter(big)
    form = big.form_with("queue")
    data = {i["name"]: i.get("value", "") for i in form["inputs"] if i["name"]}
    typed, typed_queries = opened(
        admin_client, urlsplit(form["action"]).path, **{**data, "queue": "spam-x02999"}
    )
    assert typed_queries == big_queries
    assert typed.text.count('class="field-queue_name"') == 1
    assert '<li class="selected">' in queue_filter(typed).split("spam-x02999")[0][-200:]
    listed = open_page(admin_client, typed.link(names[3]))
    assert listed.text.count('class="field-queue_name"') == 1 and names[3] in listed.text


def test_overview_opens_with_an_age_limit_past_any_date(admin_client, settings) -> None:
    """Without check E001 (silenced, or never run) a limit past year 1 still shows:
    nothing has expired or expires within the horizon."""
    from datetime import timedelta

    settings.DEADLETTER_MAX_QUEUE_AGE = timedelta.max
    store_failed_msgs("q", Message(subject="s"))
    page = open_page(admin_client, "/admin/deadletter/")
    page = open_page(admin_client, page.link("Queue overview"))
    row = page.text.split('scope="row" class="dl-name"', 1)[1].split("</tr>", 1)[0]
    assert [int(n) for n in re.findall(r'<td class="dl-num">(\d+)</td>', row)] == [1, 0, 0, 0, 0]
