"""The console's rough edges a newcomer hit: a traceback keeps its lines on the
message page, the integrations' keys are labelled, "delete all matching" says
how many, purge confirms in Django's destructive style, and the queue overview
is linked from the admin index. Pages are reached as an operator reaches them
(`tests.admin.test_admin`'s `open_page`: links followed, forms submitted)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import cbor2
import django
import pytest
from django.conf import settings
from django.test import override_settings

from deadletter.admin import bulk
from deadletter.contrib.celery import capture as celery_capture
from deadletter.contrib.tasks import framework
from deadletter.models import QueuedMessage
from deadletter.queue import store_failed_msgs
from deadletter.wire import keys
from deadletter.wire.messages import Message
from tests.admin.test_admin import CHANGELIST, message_link, open_page, page_keys
from tests.contrib import celery_jobs
from tests.contrib.contrib_tasks_env import task_settings

pytestmark = pytest.mark.django_db

OVERVIEW = "/admin/deadletter/queuedmessage/overview/"

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "shop/hooks.py", line 12, in send\n'
    "    raise HTTPError(url, 503, '<Service Unavailable>', hdrs, fp)\n"
    "HTTPError: HTTP Error 503: <Service Unavailable>\n"
)


def message_page(client: Any, queue: str, key: bytes) -> str:
    """The message page of `key`, reached from its queue's list."""
    listing = open_page(client, CHANGELIST, queue=queue)
    return open_page(client, message_link(listing, key)).text


def cell_of(page: str, label: str) -> str:
    """The value cell of the message table's row whose header starts with `label`."""
    found = re.search(rf'<th scope="row">{re.escape(label)}.*?</th><td>(.*?)</td></tr>', page, re.S)
    assert found, f"no row {label!r}"
    return found.group(1)


# --- the message page -------------------------------------------------------------


def test_a_traceback_keeps_its_lines_preformatted_and_escaped(admin_client) -> None:
    key = store_failed_msgs(
        "q", Message(subject="s", extra={"LastError": TRACEBACK, "Trace": TRACEBACK})
    )
    page = message_page(admin_client, "q", key)
    for label in ("last error", '<code class="dl-key-name">Trace</code>'):
        cell = cell_of(page, label)
        assert cell.startswith('<pre class="dl-text">') and cell.endswith("</pre>")
        assert "<Service" not in cell and "&lt;Service Unavailable&gt;" in cell
        shown = cell.removeprefix('<pre class="dl-text">').removesuffix("</pre>")
        assert len(shown.splitlines()) == 4


def test_a_one_line_error_stays_a_line_of_text(admin_client) -> None:
    key = store_failed_msgs("q", Message(subject="s", extra={"LastError": "ValueError: <b>"}))
    assert cell_of(message_page(admin_client, "q", key), "last error") == "ValueError: &lt;b&gt;"


@pytest.mark.django_db(transaction=True)
def test_a_celery_task_s_keys_are_labelled_with_their_names(admin_client, tmp_path: Path) -> None:
    celery_jobs.flaky.apply(args=(str(tmp_path / "fixed"), str(tmp_path / "record")))
    page = message_page(admin_client, "celery.celery", QueuedMessage.objects.get().key_bytes)
    assert "(unknown key)" not in page
    assert 'Celery task <code class="dl-key-name">CeleryTask</code>' in page
    assert 'keyword arguments <code class="dl-key-name">CeleryKwargs</code>' in page
    traceback = cell_of(
        page, f'traceback <code class="dl-key-name">{celery_capture.TASK_TRACEBACK}'
    )
    assert traceback.startswith('<pre class="dl-text">Traceback')


@pytest.mark.skipif(
    framework.find() is None and django.VERSION < (6, 0),
    reason="deadletter_tasks.E001: no Tasks framework on this leg",
)
@pytest.mark.django_db(transaction=True)
def test_a_django_task_s_keys_are_labelled_with_their_names(admin_client, tmp_path: Path) -> None:
    from tests.contrib import contrib_tasks_jobs as jobs  # needs the framework: after the skip

    with override_settings(
        **task_settings(list(settings.INSTALLED_APPS), "deadletter.contrib.tasks")
    ):
        jobs.flaky.enqueue(str(tmp_path / "fixed"), str(tmp_path / "record"))
    page = message_page(admin_client, "tasks.default", QueuedMessage.objects.get().key_bytes)
    assert "(unknown key)" not in page
    assert 'task <code class="dl-key-name">Task</code>' in page
    assert 'task result id <code class="dl-key-name">TaskResultID</code>' in page


def test_a_site_s_own_key_is_labelled_with_its_name(admin_client) -> None:
    key = store_failed_msgs("q", Message(subject="s", extra={"order_id": 1234}))
    page = message_page(admin_client, "q", key)
    assert cell_of(page, '<code class="dl-key-name">order_id</code>') == "1234"
    assert "unknown key" not in page


def test_an_entry_kept_as_bytes_is_labelled_with_its_key_and_shows_its_cbor(admin_client) -> None:
    """An entry Go reads and cbor2 cannot hold (a map keyed by a number) is kept as
    bytes; the page names its key and shows the bytes, never drops it silently."""
    key = keys.new_key("q")
    QueuedMessage.objects.create(key=key, value=cbor2.dumps([{"Subject": "s", "Value": {0: None}}]))
    page = message_page(admin_client, "q", key)
    assert cell_of(page, '<code class="dl-key-name">Value</code>').startswith(
        f"<code>{cbor2.dumps({0: None}).hex()}</code>"
    )


# --- bulk delete and purge --------------------------------------------------------


def test_delete_all_matching_says_how_many_it_deletes(admin_client) -> None:
    for i in range(60):
        store_failed_msgs("q", Message(subject=f"d{i}"))
    store_failed_msgs("other", Message(subject="kept"))
    listing = open_page(admin_client, CHANGELIST, queue="q")
    form = listing.form_with("_selected_action")
    confirm = listing.submit(
        admin_client, form, check=page_keys(form), action="delete_selected", select_across="1"
    )
    assert '<strong id="dl-matching">60 message rows</strong>' in confirm.text


def test_the_count_of_a_large_selection_stops_at_its_cap(monkeypatch) -> None:
    monkeypatch.setattr(bulk, "LEFT_CAP", 5)
    for i in range(8):
        store_failed_msgs("q", Message(subject=f"d{i}"))
    assert str(bulk.matching(QueuedMessage.objects.all())) == "at least 5"
    monkeypatch.setattr(bulk, "LEFT_CAP", 8)
    assert str(bulk.matching(QueuedMessage.objects.all())) == "8"


def test_purge_confirms_in_django_s_destructive_style(admin_client) -> None:
    overview = open_page(admin_client, OVERVIEW)
    confirm = open_page(admin_client, overview.link("Purge expired"))
    body = re.search(r'<body class="([^"]*)"', confirm.text)
    assert body and "delete-confirmation" in body.group(1).split()
    assert '<input type="submit" value="Yes, purge expired">' in confirm.text


# --- the admin index --------------------------------------------------------------


def test_the_queue_overview_is_linked_from_the_admin_index(admin_client) -> None:
    index = open_page(admin_client, "/admin/")
    assert open_page(admin_client, index.link("Queue overview")).url == OVERVIEW


# --- the list's cells -------------------------------------------------------------


def test_a_cell_may_break_inside_long_tokens_only() -> None:
    from deadletter.admin import rows

    text = "HTTPError: <b> for https://hooks.example.org/v2/notifications/" + "x" * 30
    shown = str(rows.breakable(text))
    assert shown.startswith("HTTPError: &lt;b&gt; for https://<wbr>hooks.<wbr>example.<wbr>")
    assert "notifications/<wbr>" + "x" * 12 + "<wbr>" + "x" * 12 + "<wbr>xxxxxx" in shown
    words = "Unterrichtsstunde verschoben: Mathematik, 3. Stunde"
    assert str(rows.breakable(words)) == words  # no word longer than LONG_TOKEN: no break in any
