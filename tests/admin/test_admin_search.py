"""The change list's search box: the search language, pages that keep it, one clear
message for a malformed search, and actions on "all matching" that act on the
matches only."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils.html import escape

from deadletter.models import QueuedMessage
from deadletter.queue.search import SearchError, lookup, parse
from deadletter.wire import codec
from tests.admin.test_admin import CHANGELIST, Page, open_page, page_keys
from tests.factories import park, parked

pytestmark = pytest.mark.django_db


def listed(page: Page) -> list[str]:
    """The subjects the page's rows show, in order."""
    forms = [f for f in page.forms if any(i["name"] == "_selected_action" for i in f["inputs"])]
    keys = page_keys(forms[0]) if forms else []
    by_key = {m.key_hex: m for m in QueuedMessage.objects.all()}
    return [codec.decode(bytes(by_key[k].value))[0].subject for k in keys]


def searched(client: Any, text: str, **params: str) -> Page:
    """The change list after typing `text` into its search box and submitting it."""
    page = open_page(client, CHANGELIST, **params)
    form = page.form_with("q")
    return Page(client.get(form["action"], {**params, "q": text}, follow=True))


def test_the_search_box_finds_whole_words_and_qualifiers(admin_client: Any) -> None:
    park("timeout talking to shop", "all fine", username="alice")
    park("timeout again", username="bob")
    assert listed(searched(admin_client, "timeout")) == ["timeout talking to shop", "timeout again"]
    assert listed(searched(admin_client, "timeout user:bob")) == ["timeout again"]
    assert listed(searched(admin_client, "time")) == []


def test_the_search_keeps_to_the_queue_filter(admin_client: Any) -> None:
    park("hello", queue="a")
    park("hello there", queue="b")
    assert listed(searched(admin_client, "hello", queue="b")) == ["hello there"]


def test_next_and_previous_pages_keep_the_search(admin_client: Any, settings: Any) -> None:
    subjects = [f"match {n:02}" for n in range(55)]
    for n, subject in enumerate(subjects):
        park(subject)
        if n % 10 == 0:
            park("noise")
    first = searched(admin_client, "match")
    assert listed(first) == subjects[:50]
    second = open_page(admin_client, first.link("next ›"))
    assert listed(second) == subjects[50:]
    back = open_page(admin_client, second.link("‹ previous"))
    assert listed(back) == subjects[:50]


def test_a_malformed_search_is_a_message_not_an_error_page(admin_client: Any) -> None:
    park("anything")
    page = searched(admin_client, 'subject:"unclosed')
    assert page.response.status_code == 200
    assert "Search: a quote is not closed" in page.text
    assert listed(page) == []


def test_delete_all_matching_a_search_deletes_the_matches_only(admin_client: Any) -> None:
    park("doomed one", "kept", "doomed two")
    page = searched(admin_client, "doomed")
    form = page.form_with("_selected_action")
    confirm = page.submit(
        admin_client, form, check=page_keys(form), action="delete_selected", select_across="1"
    )
    confirm.submit(admin_client, confirm.form_with("post"))
    assert parked() == ["kept"]


def test_a_comparison_reads_as_written_and_any_other_is_one_message(admin_client: Any) -> None:
    park("tried thrice", extra={"Attempts": 3})
    park("tried four times", extra={"Attempts": 4})
    assert listed(searched(admin_client, "attempts:>3")) == ["tried four times"]
    assert listed(searched(admin_client, "attempts:<=3")) == ["tried thrice"]
    with pytest.raises(SearchError) as refused:
        parse("error:>500")
    page = searched(admin_client, "error:>500")
    assert page.response.status_code == 200
    assert escape(f"Search: {refused.value}") in page.text
    assert listed(page) == []


def test_a_search_too_costly_for_a_page_is_a_message(admin_client: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(lookup, "MAX_CANDIDATES", 60)
    park(*[f"m{n}" for n in range(80)])
    page = searched(admin_client, "attempts:>3")
    assert page.response.status_code == 200
    assert "Search: the search read 60 messages" in page.text
    assert listed(page) == []
    assert listed(searched(admin_client, "m7")) == ["m7"]
