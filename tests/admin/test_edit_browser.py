"""Edit and retry in a real browser, on the harness of `test_admin_browser` (Debian's
Chromium driven by Playwright against `live_server`; skipped as it is skipped): a
message that fails for its typo'd address is edited from its page, the diff read
in History, then fixed and retried, and delivered once."""

from __future__ import annotations

import re
from typing import Any

import pytest

from deadletter.models import ArchivedMessage, QueuedMessage
from deadletter.queue import store_failed_msgs
from deadletter.wire import keys
from deadletter.wire.messages import Message
from tests.admin import test_admin_browser as harness

# The harness's fixtures, used here by name; importing it skipped this module already
# when Chromium or Playwright is missing.
browser = harness.browser
page = harness.page
operator = harness.operator

from playwright.sync_api import Page, expect  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

delivered: list[Message] = []


def deliver(msg: Message) -> None:
    """Fails for the typo'd address, as a mail server would; records the rest."""
    if msg.username.endswith("@exmaple.org"):
        raise ConnectionError(f"no such domain: {msg.username}")
    delivered.append(msg)


@pytest.fixture(autouse=True)
def handlers(settings: Any) -> Any:
    settings.DEADLETTER_HANDLERS = {
        "mail": {"handler": "tests.admin.test_edit_browser.deliver", "editable": True}
    }
    delivered.clear()
    yield
    delivered.clear()


def test_edit_a_message_read_the_diff_in_history_and_retry_it(operator: Page) -> None:
    key = store_failed_msgs(
        "mail", Message(subject="Ocjena: Matematika", username="ana@exmaple.org")
    )
    page = operator
    harness.open_changelist(page)
    page.locator("#result_list tbody tr").first.locator("th a").click()
    expect(page).to_have_url(re.compile(keys.to_text(key) + "/change/"))
    page.get_by_role("button", name="Retry now").click()
    expect(page.locator("ul.messagelist")).to_contain_text("1 still failing")
    expect(page.locator("table.dl-message")).to_contain_text("no such domain")

    page.get_by_role("link", name="Edit", exact=True).click()
    expect(page).to_have_url(re.compile(keys.to_text(key) + "/edit/"))
    expect(page.locator("#id_queued_at")).to_be_disabled()
    expect(page.locator(".field-extra_1")).to_contain_text("kept by the drain")
    page.fill("#id_subject", "Ocjena: Fizika")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator("ul.messagelist")).to_contain_text("Saved: subject changed")
    expect(page.locator("table.dl-message")).to_contain_text("Ocjena: Fizika")

    page.get_by_role("link", name="History").click()
    expect(page.locator("#change-history")).to_contain_text(
        'subject: "Ocjena: Matematika" → "Ocjena: Fizika"'
    )
    page.go_back()

    page.get_by_role("link", name="Edit", exact=True).click()
    page.fill("#id_username", "ana@example.org")
    page.get_by_role("button", name="Save and retry now").click()
    expect(page.locator("ul.messagelist")).to_contain_text("Saved: username changed")
    expect(page.locator("ul.messagelist")).to_contain_text("1 delivered")
    assert [(m.subject, m.username) for m in delivered] == [("Ocjena: Fizika", "ana@example.org")]
    assert not QueuedMessage.objects.exists()
    assert [e.reason for e in ArchivedMessage.objects.filter(key=key)] == ["edited", "edited"]
