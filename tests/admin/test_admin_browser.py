"""The admin in a real browser: Debian's Chromium driven by Playwright against the
server the test run starts (`live_server`), clicking the links and buttons an
operator clicks. Skipped when Chromium or Playwright is missing, unless
DEADLETTER_REQUIRE_BROWSER=1 (CI sets it), which makes that a failure."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from deadletter.admin import rows
from deadletter.models import QueuedMessage
from deadletter.queue import store_failed_msgs
from deadletter.wire import keys
from deadletter.wire.messages import Message

CHROMIUM = os.environ.get("DEADLETTER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def _missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install playwright)"
    if not shutil.which(CHROMIUM):
        return f"no Chromium at {CHROMIUM} (apt-get install -y chromium)"
    return None


if (_why := _missing()) is not None:
    if os.environ.get("DEADLETTER_REQUIRE_BROWSER") == "1":
        pytest.fail(f"browser tests cannot run: {_why}", pytrace=False)
    pytest.skip(f"browser tests skipped: {_why}", allow_module_level=True)

from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CHANGELIST = "/admin/deadletter/queuedmessage/"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One Chromium for the module. Playwright's sync API keeps an event loop in
    this thread while it runs; the tests' own ORM calls (set-up, checks, the
    database flush after each test) are still plain synchronous code."""
    saved = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as pw:
            launched = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield launched
            launched.close()
    finally:
        if saved is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = saved


@pytest.fixture
def page(browser: Browser, live_server: Any) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=live_server.url)
    opened = context.new_page()
    opened.set_default_timeout(20_000)
    yield opened
    context.close()


def log_in(page: Page, username: str, password: str) -> None:
    page.goto("/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    expect(page.locator("#user-tools")).to_contain_text(username.upper(), ignore_case=True)


@pytest.fixture
def operator(page: Page, admin_user: Any) -> Page:
    """A superuser logged in (pytest-django's admin / password)."""
    log_in(page, "admin", "password")
    return page


def open_changelist(page: Page) -> None:
    page.goto("/admin/")
    page.get_by_role("link", name="Queued messages").first.click()
    expect(page).to_have_url(re.compile(re.escape(CHANGELIST) + "$"))


def subjects_listed(page: Page) -> list[str]:
    """The subjects the list shows, once the page a click led to has loaded (the
    URL changes when the navigation starts, before the new list is there)."""
    page.wait_for_load_state("load")
    return page.locator("#result_list td.field-subject").all_inner_texts()


def test_filter_open_retry_and_delete_a_message(operator: Page, settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"telegram-queue": "tests.factories.failing_handler"}
    store_failed_msgs("discord-queue", Message(subject="in discord"))
    key = store_failed_msgs("telegram-queue", Message(subject="Ocjena: Matematika"))
    store_failed_msgs("telegram-queue", Message(subject="Zaključna ocjena"))
    page = operator
    open_changelist(page)
    assert subjects_listed(page) == ["in discord", "Ocjena: Matematika", "Zaključna ocjena"]
    expect(page.locator("#result_list thead")).to_contain_text("by queue, oldest first")
    parked = page.locator("#result_list tbody th.field-parked").all_inner_texts()
    assert all(re.search(r"\d:\d\d:\d\d", text) for text in parked), parked  # to the second

    page.locator("#changelist-filter").get_by_role("link", name="telegram-queue").click()
    expect(page).to_have_url(re.compile(r"queue=telegram-queue"))
    assert subjects_listed(page) == ["Ocjena: Matematika", "Zaključna ocjena"]

    page.locator("#result_list tbody tr").first.locator("th a").click()
    expect(page).to_have_url(re.compile(keys.to_text(key) + "/change/"))
    expect(page.locator("table.dl-message")).to_contain_text("Ocjena: Matematika")

    page.get_by_role("button", name="Retry now").click()
    expect(page.locator("ul.messagelist")).to_contain_text("1 still failing")
    expect(page.locator("table.dl-message")).to_contain_text("ConnectionError: timeout after 30 s")
    assert (
        QueuedMessage.objects.get(key=key).signature
        == "ConnectionError: timeout after # s talking to #"
    )

    page.get_by_role("link", name="History").click()
    expect(page.locator("#change-history")).to_contain_text("Retried: failed: ConnectionError")
    page.go_back()

    delete = page.get_by_role("button", name="Delete")  # Django 6.1: role="button"
    delete.or_(page.get_by_role("link", name="Delete", exact=True)).first.click()  # 5.2: a link
    page.get_by_role("button", name=re.compile("Yes, I.m sure")).click()
    expect(page.locator("ul.messagelist")).to_contain_text("deleted successfully")
    expect(page).to_have_url(re.compile(r"queue=telegram-queue"))  # back to the filtered list
    assert not QueuedMessage.objects.filter(key=key).exists()
    assert QueuedMessage.objects.count() == 2


def test_bulk_delete_goes_through_the_confirmation(operator: Page) -> None:
    stored = [store_failed_msgs("q", Message(subject=f"m{i}")) for i in range(4)]
    page = operator
    open_changelist(page)
    rows = page.locator("#result_list tbody tr")
    rows.nth(1).locator("input.action-select").check()
    rows.nth(2).locator("input.action-select").check()
    expect(page.locator(".action-counter")).to_contain_text("2 of 4 selected")
    page.select_option("select[name=action]", "delete_selected")
    page.get_by_role("button", name=re.compile(r"^(Run|Go)$")).click()  # Django 6.1 | 5.2

    expect(page.locator("#content")).to_contain_text("Delete these 2 messages?")
    page.get_by_role("button", name=re.compile("Yes, I.m sure")).click()
    expect(page.locator("ul.messagelist")).to_contain_text("Successfully deleted 2")
    assert subjects_listed(page) == ["m0", "m3"]
    left = sorted(bytes(k) for k in QueuedMessage.objects.values_list("key", flat=True))
    assert left == [stored[0], stored[3]]


def test_drain_from_the_overview(operator: Page, settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.ok_handler"}
    for i in range(5):
        store_failed_msgs("q", Message(subject=f"d{i}"))
    page = operator
    page.goto("/admin/deadletter/")
    page.locator("#content").get_by_role("link", name="Queue overview").click()
    expect(page.locator("#dl-queues")).to_contain_text("q")
    page.get_by_role("link", name="Drain", exact=True).click()
    page.select_option("select[name=queue]", "q")
    page.fill("input[name=limit]", "3")
    page.get_by_role("button", name="Yes, drain").click()
    expect(page.locator("ul.messagelist")).to_contain_text("Drained 3 message(s): 3 delivered")
    assert QueuedMessage.objects.count() == 2
    expect(page.locator("#dl-queues tbody tr").first.locator("td").first).to_have_text("2")


def test_a_user_without_the_drain_permission_is_refused(page: Page, django_user_model: Any) -> None:
    from django.contrib.auth.models import Permission

    viewer = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_queuedmessage"))
    store_failed_msgs("q", Message(subject="look, don't touch"))
    log_in(page, "viewer", "pw")
    open_changelist(page)
    page.locator("#result_list tbody tr").first.locator("th a").click()
    expect(page.locator("table.dl-message")).to_contain_text("look, don't touch")
    expect(page.get_by_role("button", name="Retry now")).to_have_count(0)
    page.go_back()
    page.locator("#content").get_by_role("link", name="Queue overview").click()
    expect(page.locator("#dl-queues")).to_contain_text("q")
    expect(page.get_by_role("link", name="Drain", exact=True)).to_have_count(0)
    response = page.goto(page.url + "drain/")
    assert response is not None and response.status == 403
    assert QueuedMessage.objects.count() == 1


def test_the_changelist_fits_1280_px_with_the_sidebar_open(operator: Page) -> None:
    long_error = "HTTPError: 503 Service Unavailable for https://hooks.example.org/" + "x" * 300
    for i in range(30):
        store_failed_msgs(
            f"a-rather-long-queue-name-{i % 3}",
            Message(
                subject="Pisana provjera iz fizike, kemije i biologije " * 3,
                username=f"ucenik.s.dugim.imenom.{i}@osnovna-skola-primjer.skole.hr",
                extra={"Attempts": 12, "LastError": long_error},
            ),
        )
    page = operator
    page.goto("/admin/")
    page.evaluate("localStorage.setItem('django.admin.navSidebarIsOpen', 'true')")
    open_changelist(page)
    expect(page.locator("#nav-sidebar")).to_be_visible()
    assert page.locator("#result_list tbody tr").count() == 30
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1280, f"the changelist is {width} px wide"
    results = page.evaluate(
        "[document.querySelector('#changelist .results').scrollWidth,"
        " document.querySelector('#changelist .results').clientWidth]"
    )
    assert results[0] <= results[1], f"the list scrolls: {results}"  # "last error" in view
    box = page.locator("#result_list thead th").last.bounding_box()
    assert box is not None and box["x"] + box["width"] <= 1280


def park_wide_rows() -> None:
    """Messages with long queue names, subjects, causes and drops: what makes pages wide."""
    from deadletter.store import counters, sql

    long_error = "HTTPError: 503 Service Unavailable for https://hooks.example.org/" + "x" * 300
    for i in range(9):
        name = f"a-rather-long-queue-name-{i % 3}"
        key = store_failed_msgs(
            name,
            Message(
                subject="Pisana provjera iz fizike, kemije i biologije " * 3,
                username=f"ucenik.s.dugim.imenom.{i}@osnovna-skola-primjer.skole.hr",
                fields=["https://hooks.example.org/" + "y" * 400],
                extra={"Attempts": 12, "LastError": f"{long_error} {i}"},
            ),
        )
        QueuedMessage.objects.filter(key=key).update(signature=f"{long_error[:150]} {i % 2}")
        for reason in counters.DROP_REASONS:
            counters.record_drop(sql.connection(), name, reason, 1234)


def changelist_with_the_sidebar(
    browser: Browser, live_server: Any, width: int, height: int
) -> tuple[BrowserContext, Page]:
    """A window of this size, the superuser logged in, the sidebar open, on the list."""
    context = browser.new_context(
        viewport={"width": width, "height": height}, base_url=live_server.url
    )
    page = context.new_page()
    log_in(page, "admin", "password")
    page.evaluate("localStorage.setItem('django.admin.navSidebarIsOpen', 'true')")
    open_changelist(page)
    return context, page


@pytest.mark.parametrize("width", [1280, 1920])
def test_the_overview_and_a_message_page_fit_with_the_sidebar_open(
    browser: Browser, live_server: Any, admin_user: Any, width: int
) -> None:
    park_wide_rows()
    context, page = changelist_with_the_sidebar(browser, live_server, width, 800)
    page.get_by_role("link", name="Queue overview").first.click()
    page.wait_for_url("**/overview/")  # the changelist has a sidebar too: wait for the page
    expect(page.locator("#nav-sidebar")).to_be_visible()
    overview = page.evaluate("document.documentElement.scrollWidth")
    assert overview <= width, f"the overview is {overview} px wide at {width}"
    last = page.locator("table thead th").last.bounding_box()
    assert last is not None and last["x"] + last["width"] <= width  # "failures by cause"
    open_changelist(page)
    page.locator("#result_list tbody tr").first.locator("th a").click()
    expect(page.get_by_role("button", name="Retry now")).to_be_visible()  # the page has come
    message = page.evaluate("document.documentElement.scrollWidth")
    assert message <= width, f"the message page is {message} px wide at {width}"
    retry = page.get_by_role("button", name="Retry now").bounding_box()
    assert retry is not None and retry["y"] + retry["height"] <= 800, "Retry is below the fold"
    deletes = page.get_by_role("button", name="Delete")  # Django 6.1; 5.2: a link
    delete = deletes.or_(page.get_by_role("link", name="Delete", exact=True)).first.bounding_box()
    assert delete is not None and delete["y"] + delete["height"] <= 800, "Delete is below the fold"
    context.close()


# Each word (a run of letters and digits) of the list's cells and the lines its
# text boxes are on; a word on two lines was broken inside. Runs longer than
# rows.LONG_TOKEN (hex keys, hashes) may break: no column can hold them.
WORDS_ON_LINES = """(longToken) => {
  const broken = [];
  for (const cell of document.querySelectorAll('#result_list tbody td, #result_list tbody th')) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const m of node.data.matchAll(/[\\p{L}\\p{N}]+/gu)) {
        if (m[0].length > longToken) continue;
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const lines = new Set(
          [...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.bottom))
        );
        if (lines.size > 1) broken.push(`${m[0]} (${cell.className})`);
      }
    }
  }
  return broken;
}"""


@pytest.mark.parametrize("width", [1280, 1920])
def test_no_word_of_the_list_s_cells_is_broken_across_lines(
    browser: Browser, live_server: Any, admin_user: Any, width: int
) -> None:
    long_error = (
        "HTTPError: HTTP Error 503: Service Unavailable (notifications endpoint "
        "unreachable) for https://hooks.example.org/v2/notifications/" + "x" * 120
    )
    for i in range(12):
        store_failed_msgs(
            ("celery.notifications", "webhooks-outbound-partner-integrations", "telegram")[i % 3],
            Message(
                subject="Unterrichtsstunde verschoben: Mathematik, 3. Stunde",
                username=f"ucenik.s.dugim.imenom.{i}@osnovna-skola-primjer.skole.hr",
                extra={"Attempts": 12, "LastError": f"{long_error} {i}"},
            ),
        )
    context, page = changelist_with_the_sidebar(browser, live_server, width, 900)
    expect(page.locator("#nav-sidebar")).to_be_visible()
    assert page.locator("#result_list tbody tr").count() == 12
    broken = page.evaluate(WORDS_ON_LINES, rows.LONG_TOKEN)
    assert broken == [], f"words broken across lines at {width} px: {sorted(set(broken))}"
    scrolled = page.evaluate("document.documentElement.scrollWidth")
    assert scrolled <= width, f"the changelist is {scrolled} px wide at {width}"
    context.close()


def test_purge_s_confirm_button_is_django_s_destructive_one(operator: Page) -> None:
    page = operator
    page.goto("/admin/deadletter/")
    page.locator("#content").get_by_role("link", name="Queue overview").click()
    page.get_by_role("link", name="Purge expired").click()
    button = page.get_by_role("button", name="Yes, purge expired")
    colour = button.evaluate("b => getComputedStyle(b).backgroundColor")
    destructive = page.evaluate(
        "(() => { const probe = document.createElement('div');"
        " probe.style.backgroundColor = 'var(--delete-button-bg)';"
        " document.body.append(probe);"
        " return getComputedStyle(probe).backgroundColor; })()"
    )
    assert colour == destructive, f"{colour} is not Django's delete button colour {destructive}"
