"""The figures the admin's lists and confirmations show, each one counted: a list
that is never counted never says how many it holds, a confirmation never names a
negative or contradictory number, and a Retry of every matching row asks first,
saying how many, as Delete does."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from deadletter.models import QueueAccess, QueuedMessage
from deadletter.queue import fetch_failed_msgs, store_failed_msgs
from deadletter.wire.messages import Message
from tests.admin.test_admin import CHANGELIST, Page, open_page, page_keys
from tests.admin.test_admin_search import searched

pytestmark = pytest.mark.django_db

OVERVIEW = f"{CHANGELIST}overview/"


def found_note(page: Page) -> str:
    """What the search bar says the list found ("" when it says nothing)."""
    match = re.search(r'<span class="small quiet"[^>]*>(.*?)\(', page.text, re.S)
    return " ".join(match.group(1).split()) if match else ""


def test_a_filtered_list_of_356_rows_never_says_it_holds_a_page(admin_client: Any) -> None:
    for i in range(356):
        store_failed_msgs("q", Message(subject=f"m{i}"))
    page = open_page(admin_client, CHANGELIST, queue="q")
    assert found_note(page) == "more than 50 results"
    assert "50 results" not in page.text.replace("more than 50 results", "")


def test_a_search_with_100_matches_says_more_than_a_page(admin_client: Any) -> None:
    for i in range(100):
        store_failed_msgs("q", Message(subject=f"timeout {i}"))
    first = searched(admin_client, "timeout")
    assert found_note(first) == "more than 50 results"
    second = open_page(admin_client, first.link("next ›"))
    assert found_note(second) == "50 results on this page"


@pytest.fixture
def billing() -> Client:
    """Staff kept by a rule to `billing.*`, with every permission of the queue."""
    user = User.objects.create_user("bill", password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(
            codename__in=["view_queuedmessage", "delete_queuedmessage", "drain_queuedmessage"]
        )
    )
    team = Group.objects.create(name="billing")
    user.groups.add(team)
    QueueAccess.objects.create(group=team, queues="billing.*", retry=True, delete=True)
    QueueAccess.objects.create(user=user, queues="mail")  # view only
    client = Client()
    client.force_login(user)
    return client


def test_a_restricted_bulk_delete_counts_only_what_it_deletes(billing: Client) -> None:
    kept = store_failed_msgs("billing.cards", Message(subject="bill"))
    mail = [store_failed_msgs("mail", Message(subject=f"mail {i}")) for i in range(20)]
    listing = open_page(billing, CHANGELIST)
    form = listing.form_with("_selected_action")
    confirm = listing.submit(
        billing, form, check=[k.hex() for k in [kept, *mail]], action="delete_selected"
    )
    assert "20 selected message(s) are not in queues where you may delete" in confirm.text
    assert "Delete this message?" in confirm.text
    assert "more" not in confirm.text.split('class="dl-sample"')[1].split("</ul>")[0]
    assert not re.search(r"(?<!\w)-\d", confirm.text.split('id="content"')[1].split("<form")[0])
    done = confirm.submit(billing, confirm.form_with("post"))
    assert "Successfully deleted 1 queued message(s)." in done.text
    assert len(fetch_failed_msgs("mail")) == 20


def test_a_bulk_delete_of_nothing_the_user_may_delete_asks_nothing(billing: Client) -> None:
    mail = store_failed_msgs("mail", Message(subject="mail"))
    listing = open_page(billing, CHANGELIST)
    form = listing.form_with("_selected_action")
    page = listing.submit(billing, form, check=[mail.hex()], action="delete_selected")
    assert "Nothing to delete." in page.text
    assert "Are you sure?" not in page.text
    assert QueuedMessage.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_retry_of_every_matching_row_asks_first_and_says_how_many(
    admin_client: Any, settings: Any
) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.ok_handler"}
    for i in range(60):
        store_failed_msgs("q", Message(subject=f"r{i}"))
    listing = open_page(admin_client, CHANGELIST, queue="q")
    form = listing.form_with("_selected_action")
    confirm = listing.submit(
        admin_client, form, check=page_keys(form), action="retry_now", select_across="1"
    )
    assert "Are you sure?" in confirm.text
    assert '<strong id="dl-matching">60 message rows</strong>' in confirm.text
    assert QueuedMessage.objects.count() == 60  # nothing handed over yet
    done = confirm.submit(admin_client, confirm.form_with("post"))
    assert "Retried 60 message(s): 60 delivered" in done.text
    assert QueuedMessage.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_the_drain_page_lists_the_users_queues_with_their_policy_in_words(
    billing: Client, settings: Any
) -> None:
    settings.DEADLETTER_HANDLERS = {
        "billing.cards": {
            "handler": "tests.factories.ok_handler",
            "max_attempts": 3,
            "backoff": [60, 3600],
            "breaker": 5,
        },
        "billing.refunds": "tests.factories.ok_handler",
        "support": {
            "handler": "tests.factories.ok_handler",
            "alerts": {"channels": [{"webhook": "https://hooks.invalid/x", "secret": "s3cret"}]},
        },
    }
    page = open_page(billing, open_page(billing, OVERVIEW).link("Drain"))
    table = page.text.split('id="dl-drainable"')[1].split("</table>")[0]
    rows = [re.sub(r"<[^>]+>", "|", r) for r in re.findall(r"<tr>(.*?)</tr>", table)][1:]
    assert [[c for c in r.split("|") if c] for r in rows] == [
        [
            "billing.cards",
            "tests.factories.ok_handler",
            "3 attempts, backoff 1 min up to 1 h, breaker 5",
        ],
        [
            "billing.refunds",
            "tests.factories.ok_handler",
            "no attempt limit, no backoff, no breaker",
        ],
    ]
    assert "support" not in page.text and "s3cret" not in page.text and "{" not in table
