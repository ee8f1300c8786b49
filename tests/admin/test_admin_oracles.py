"""No page or answer tells a restricted user what their rules hide: walked as a
billing-team operator (every model permission of the app, a `billing.*` rule)
on a site whose payroll queue has a webhook secret in its policy. Every admin
page the app adds is reached by following the links and submitting the forms the
pages render, and every API list is read; none shows the payroll queue's name,
its messages, its causes or a secret of the settings."""

from __future__ import annotations

import re
from collections import Counter, deque
from datetime import timedelta
from typing import Any
from urllib.parse import urljoin, urlsplit

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from deadletter.drain import Drainer, DrainOptions
from deadletter.drain.redrives import plan_redrive
from deadletter.models import ArchivedMessage, Cause, QueueAccess, QueuedMessage, Redrive
from deadletter.queue import store_failed_msgs
from deadletter.queue.archive import discard
from deadletter.wire import keys
from deadletter.wire.messages import Message
from tests.admin.test_admin import CHANGELIST, Page, page_keys

pytestmark = pytest.mark.django_db(transaction=True)

HIDDEN = "payroll"  # the queue's name, its subjects and its error all carry it
SECRETS = ("whsec-payroll-9f8e7d", "whsec-global-1a2b3c", "metrics-token-77aa")
API = "/api/deadletter/"
# Pages that leave the app's admin (the user's own account), or end the session.
NOT_WALKED = ("/admin/logout/", "/admin/password_change/", "/admin/auth/")
MAX_PAGES = 400
PER_KIND = 4


@pytest.fixture(autouse=True)
def site(settings: Any) -> None:
    """Two teams' queues; the payroll team's policy alerts a webhook with a secret,
    as docs/alerts.md lays it out, and so do the global alerts."""
    channel = {"webhook": "https://hooks.invalid/payroll", "secret": SECRETS[0]}
    settings.DEADLETTER_HANDLERS = {
        "billing.refunds": {
            "handler": "tests.factories.failing_handler",
            "max_attempts": 3,
            "backoff": [60, 3600],
            "breaker": 5,
        },
        "payroll.runs": {
            "handler": "tests.factories.failing_handler",
            "archive_for": timedelta(days=3),
            "alerts": {"depth": 1, "channels": [channel]},
        },
    }
    settings.DEADLETTER_ALERTS = {
        "depth": 1000,
        "channels": [{"webhook": "https://hooks.invalid/all", "secret": SECRETS[1]}],
    }
    settings.DEADLETTER_METRICS_TOKEN = SECRETS[2]


@pytest.fixture
def parked() -> None:
    """Messages of both teams, failed once by a drain (so each has an attempt, a
    cause and a signature), one of each archived, a redrive of each queue."""
    for i in range(55):
        store_failed_msgs("billing.refunds", Message(subject=f"refund {i}"))
    payroll = [
        store_failed_msgs("payroll.runs", Message(subject=f"payroll run {i}")) for i in range(3)
    ]
    Drainer(["billing.refunds", "payroll.runs"], DrainOptions(limit=100)).run()
    discard(payroll[0], actor="admin")
    discard(store_failed_msgs("billing.refunds", Message(subject="refund gone")), actor="admin")
    plan_redrive(queue="payroll.runs", started_by="admin")
    plan_redrive(queue="billing.refunds", started_by="admin")


@pytest.fixture
def billing() -> Client:
    """Staff with every permission of the app but the rules' own, kept by a group
    rule to `billing.*` (another group's rule grants `payroll.*`)."""
    user = User.objects.create_user("bill", password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="deadletter").exclude(
            content_type__model="queueaccess"
        )
    )
    team = Group.objects.create(name="billing")
    user.groups.add(team)
    QueueAccess.objects.create(
        group=team, queues="billing.*", retry=True, edit=True, delete=True, redrive=True
    )
    payroll = Group.objects.create(name="payroll-team")
    QueueAccess.objects.create(group=payroll, queues="payroll.*", retry=True, delete=True)
    client = Client()
    client.force_login(user)
    return client


def leaks(text: str) -> list[str]:
    found = [s for s in SECRETS if s in text]
    return found + ([HIDDEN] if HIDDEN in text.lower() else [])


def shape(url: str) -> tuple[str, bool]:
    """What kind of page `url` is: its path with keys and ids as placeholders, and
    whether a query string picks a filter or a page of it."""
    parts = urlsplit(url)
    path = re.sub(r"/[0-9a-f]{16,}/|/\d+/", "/<id>/", parts.path)
    return path, bool(parts.query)


def walked(client: Client, start: list[str]) -> dict[str, Page]:
    """Every kind of admin page reachable from `start` by links, breadth first: a
    few of each kind (`shape`), not every filter combination of every list."""
    seen: dict[str, Page] = {}
    kinds: Counter[tuple[str, bool]] = Counter()
    todo = deque(start)
    while todo and len(seen) < MAX_PAGES:
        url = todo.popleft()
        if url in seen or kinds[shape(url)] >= PER_KIND:
            continue
        kinds[shape(url)] += 1
        response = client.get(url)
        if response.status_code in (301, 302):
            todo.append(urljoin(url, response["Location"]))
            continue
        assert response.status_code in (200, 403, 404), (url, response.status_code)
        page = Page(response)
        seen[url] = page
        for _, href in page.links:
            target = urljoin(url, href)
            path = urlsplit(target).path
            if path.startswith("/admin/") and not path.startswith(NOT_WALKED):
                todo.append(target.split("#")[0])
    return seen


def submitted(client: Client, pages: dict[str, Page]) -> dict[str, Page]:
    """The pages the forms of the unfiltered lists answer: each search box with words
    of the hidden queue's messages (never its name, which the box would echo), and
    each action on every matching row (its confirmation page where it asks first)."""
    found: dict[str, Page] = {}
    for url, page in pages.items():
        if urlsplit(url).query:
            continue
        for form in page.forms:
            names = {i["name"] for i in form["inputs"]}
            if "q" in names:
                for words in ("run", "ConnectionError"):
                    answer = Page(client.get(form["action"], {"q": words}, follow=True))
                    found[f"{url} q={words}"] = answer
            if "action" in names and "_selected_action" in names:
                (select,) = [i for i in form["inputs"] if i["name"] == "action"]
                for action in _options(page, select):
                    answer = page.submit(
                        client,
                        form,
                        check=page_keys(form),
                        action=action,
                        select_across="1",
                    )
                    found[f"{url} action={action}"] = answer
    return found


def _options(page: Page, select: dict[str, str]) -> list[str]:
    """The actions a changelist's select offers (its option values)."""
    text = page.text
    start = text.index('name="action"')
    end = text.index("</select>", start)
    values = [part.split('"')[0] for part in text[start:end].split('value="')[1:]]
    return [v for v in values if v]


def test_no_admin_page_or_form_shows_another_teams_queue_or_a_secret(
    parked: None, billing: Client
) -> None:
    pages = walked(billing, ["/admin/", f"{CHANGELIST}overview/drain/"])
    assert len(pages) > 30  # the walk reached the app's pages, not just the index
    reached = {urlsplit(u).path for u in pages}
    for path in (
        f"{CHANGELIST}overview/",
        f"{CHANGELIST}overview/drain/",
        f"{CHANGELIST}overview/purge/",
        "/admin/deadletter/archivedmessage/",
        "/admin/deadletter/redrive/",
        "/admin/deadletter/cause/",
    ):
        assert path in reached, path
    pages.update(submitted(billing, pages))
    leaked = {url: leaks(page.text) for url, page in pages.items() if leaks(page.text)}
    assert leaked == {}


def test_no_api_list_shows_another_teams_queue_or_a_secret(parked: None, billing: Client) -> None:
    lists = [
        f"{API}queues/",
        f"{API}queues/billing.refunds/",
        f"{API}queues/billing.refunds/messages/",
        f"{API}messages/",
        f"{API}messages/?q=payroll",
        f"{API}messages/?q=ConnectionError",
        f"{API}archive/",
        f"{API}archive/?queue=payroll.runs",
        f"{API}redrives/",
        f"{API}schema/",
    ]
    read = []
    for url in lists:
        while url:
            response = billing.get(url, HTTP_ACCEPT="application/json")
            assert response.status_code in (200, 404), (url, response.status_code)
            read.append(url)
            text = response.content.decode()
            assert leaks(text) == [], (url, leaks(text))
            is_json = response["Content-Type"].startswith("application/json")
            body = response.json() if is_json else {}
            url = body.get("next") if isinstance(body, dict) else None
    assert len(read) >= len(lists)


def object_pages(message: str, entry: int, cause: int, redrive: int) -> list[str]:
    """Each admin page an object has, for a message key (hex) and the others' ids."""
    pages = [f"{CHANGELIST}{message}/{p}/" for p in ("change", "history", "delete", "edit")]
    for model, pk in (("archivedmessage", entry), ("cause", cause), ("redrive", redrive)):
        pages += [f"/admin/deadletter/{model}/{pk}/{p}/" for p in ("change", "history", "delete")]
    return pages


def hidden_pages() -> list[str]:
    """The pages of the payroll queue's own objects: a message, an archived one, a
    cause, a redrive."""
    low, high = keys.queue_bounds("payroll.runs")
    message = QueuedMessage.objects.filter(key__gte=low, key__lt=high).first()
    entry = ArchivedMessage.objects.filter(queue="payroll.runs").first()
    cause = Cause.objects.filter(queue="payroll.runs").first()
    redrive = Redrive.objects.filter(queue="payroll.runs").first()
    assert message and entry and cause and redrive
    return object_pages(message.key_hex, entry.pk, cause.pk, redrive.pk)


def answer(client: Client, url: str) -> tuple[int, str]:
    response = client.get(url)
    return response.status_code, response.get("Location", "")


def test_another_teams_objects_answer_as_objects_that_do_not_exist(
    parked: None, billing: Client
) -> None:
    """Each page of a payroll object answers as the same page of an object that
    does not exist (status and redirect): nothing says it exists, nor shows it."""
    absent = object_pages(keys.make_key("payroll.runs", 1, 1).hex(), 10**9, 10**9, 10**9)
    hidden = hidden_pages()
    assert [answer(billing, url) for url in hidden] == [answer(billing, url) for url in absent]
    assert [url for url in hidden if leaks(billing.get(url, follow=True).content.decode())] == []
