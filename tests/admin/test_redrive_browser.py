"""Redrives in a real browser, on the harness of `test_admin_browser` (Debian's
Chromium driven by Playwright against `live_server`; skipped as it is skipped):
from a filtered list, "Redrive matching…", count, plan, and Cancel."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission

from deadletter.models import Redrive
from tests.admin import test_admin_browser as harness
from tests.factories import park

# The harness's fixtures, used here by name; importing it skipped this module already
# when Chromium or Playwright is missing.
browser = harness.browser
page = harness.page
operator = harness.operator

from playwright.sync_api import Page, expect  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def handlers(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"webhooks": "tests.factories.ok_handler"}


def open_queue(page: Page, queue: str) -> None:
    harness.open_changelist(page)
    page.locator("#changelist-filter").get_by_role("link", name=queue).click()
    expect(page).to_have_url(re.compile(f"queue={queue}"))


def test_redrive_matching_counts_plans_and_cancels(operator: Page) -> None:
    park("invoice paid", "invoice paid", "invoice paid", "refund", queue="webhooks")
    park("invoice paid", queue="other")
    page = operator
    open_queue(page, "webhooks")
    page.get_by_role("link", name="Redrive matching…").click()
    expect(page.locator("#dl-plan")).to_contain_text("4 messages of queue webhooks match now")

    page.fill("input[name=search]", "invoice")
    page.get_by_role("button", name="Count again").click()
    expect(page.locator("#dl-plan")).to_contain_text("3 messages of queue webhooks match now")
    page.fill("input[name=rate]", "10")
    page.fill("input[name=ramp]", "1,2")
    page.get_by_role("button", name="Redrive 3 messages").click()

    expect(page.locator("ul.messagelist")).to_contain_text("planned: 3 message(s)")
    redrive = Redrive.objects.get()
    expect(page).to_have_url(re.compile(f"/redrive/{redrive.pk}/change/$"))
    expect(page.locator("#content")).to_contain_text("0 of 3 (0%)")
    assert (redrive.search, redrive.rate, redrive.ramp) == ("invoice", 10.0, [1, 2])

    page.get_by_role("link", name="Cancel redrive").click()
    expect(page.locator("#content")).to_contain_text("Cancel this redrive?")
    page.get_by_role("button", name=re.compile("Yes, I.m sure")).click()
    expect(page.locator("ul.messagelist")).to_contain_text(f"Cancelled redrive(s) {redrive.pk}")
    expect(page.get_by_role("link", name="Cancel redrive")).to_have_count(0)
    redrive.refresh_from_db()
    assert redrive.status == Redrive.Status.CANCELLED

    page.get_by_role("link", name="History").click()
    expect(page.locator("#change-history")).to_contain_text("Planned: 3 message(s) of webhooks")
    expect(page.locator("#change-history")).to_contain_text("Cancelled")


def test_the_lists_search_box_is_the_plans_search(operator: Page) -> None:
    park("invoice paid", "refund", "refund", queue="webhooks")
    page = operator
    open_queue(page, "webhooks")
    page.fill("#searchbar", "refund")
    page.press("#searchbar", "Enter")
    expect(page).to_have_url(re.compile(r"q=refund"))
    page.get_by_role("link", name="Redrive matching…").click()
    expect(page.locator("input[name=search]")).to_have_value("refund")
    expect(page.locator("#dl-plan")).to_contain_text("2 messages of queue webhooks match now")
    page.get_by_role("button", name="Redrive 2 messages").click()
    expect(page.locator("ul.messagelist")).to_contain_text("planned: 2 message(s)")
    assert Redrive.objects.get().search == "refund"


def test_a_bad_search_is_a_form_error_and_plans_nothing(operator: Page) -> None:
    park("a", queue="webhooks")
    page = operator
    open_queue(page, "webhooks")
    page.get_by_role("link", name="Redrive matching…").click()
    page.fill("input[name=search]", 'subject:"unclosed')
    page.get_by_role("button", name=re.compile("^Redrive")).click()
    expect(page.locator(".errornote")).to_be_visible()
    expect(page.locator(".field-search .errorlist")).to_contain_text("a quote is not closed")
    assert not Redrive.objects.exists()


def test_without_the_permission_the_list_has_no_redrive_link(
    page: Page, django_user_model: Any
) -> None:
    viewer = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_queuedmessage"))
    park("a", queue="webhooks")
    harness.log_in(page, "viewer", "pw")
    open_queue(page, "webhooks")
    expect(page.locator("#content").get_by_role("link", name="Queue overview")).to_be_visible()
    expect(page.get_by_role("link", name="Redrive matching…")).to_have_count(0)
