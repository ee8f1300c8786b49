from __future__ import annotations

import pytest
from django.urls import reverse

from deadletter import keys
from deadletter.messages import Message
from deadletter.models import QueuedMessage
from deadletter.queue import fetch_failed_msgs, store_failed_msgs

pytestmark = pytest.mark.django_db


def change_url(key: bytes) -> str:
    return reverse("admin:deadletter_queuedmessage_change", args=[keys.to_text(key)])


def test_changelist_lists_messages_in_queue_order(admin_client) -> None:
    store_failed_msgs("q", Message(subject="first"))
    store_failed_msgs("q", Message(subject="second"))
    page = admin_client.get(reverse("admin:deadletter_queuedmessage_changelist"))
    body = page.content.decode()
    assert page.status_code == 200
    assert body.index("first") < body.index("second")


def test_changelist_links_rows_by_hex_key(admin_client) -> None:
    key = store_failed_msgs("q", Message(subject="linked"))
    page = admin_client.get(reverse("admin:deadletter_queuedmessage_changelist"))
    assert change_url(key) in page.content.decode()


def test_change_page_shows_the_decoded_message(admin_client) -> None:
    key = store_failed_msgs("q", Message(subject="Ocjena: Matematika", extra={"LastError": "x"}))
    page = admin_client.get(change_url(key))
    assert page.status_code == 200
    assert "Ocjena: Matematika" in page.content.decode()
    assert "LastError" in page.content.decode()


def test_change_page_of_a_corrupt_row_says_so(admin_client) -> None:
    key = keys.new_key("q")
    QueuedMessage.objects.create(key=key, value=b"corrupted cbor data")
    page = admin_client.get(change_url(key))
    assert "corrupt row" in page.content.decode()


def test_a_key_that_is_not_hex_is_not_found(admin_client) -> None:
    url = reverse("admin:deadletter_queuedmessage_change", args=["zz-not-hex"])
    assert admin_client.get(url, follow=True).status_code == 200
    assert not QueuedMessage.objects.exists()


def test_deleting_in_the_admin_dequeues_the_row(admin_client) -> None:
    key = store_failed_msgs("q", Message(subject="gone"))
    store_failed_msgs("q", Message(subject="kept"))
    url = reverse("admin:deadletter_queuedmessage_delete", args=[keys.to_text(key)])
    admin_client.post(url, {"post": "yes"})
    assert [q.msg.subject for q in fetch_failed_msgs("q")] == ["kept"]


def test_rows_cannot_be_added_or_edited(admin_client) -> None:
    assert admin_client.get(reverse("admin:deadletter_queuedmessage_add")).status_code == 403


def test_queue_filter_lists_queues_and_shows_only_the_chosen_one(admin_client) -> None:
    store_failed_msgs("telegram-queue", Message(subject="in telegram"))
    store_failed_msgs("discord-queue", Message(subject="in discord"))
    url = reverse("admin:deadletter_queuedmessage_changelist")
    body = admin_client.get(url, {"queue": "discord-queue"}).content.decode()
    assert "telegram-queue" in body  # offered in the filter
    assert "in discord" in body
    assert "in telegram" not in body


def ok_handler(msg: Message) -> None:
    return None


def failing_handler(msg: Message) -> None:
    raise ConnectionError("still down")


def retry(admin_client, *keys_: bytes):
    url = reverse("admin:deadletter_queuedmessage_changelist")
    return admin_client.post(
        url,
        {"action": "retry_now", "_selected_action": [keys.to_text(k) for k in keys_]},
        follow=True,
    )


@pytest.mark.django_db(transaction=True)
def test_retry_now_delivers_the_selected_rows_only(admin_client, settings) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.test_admin.ok_handler"}
    chosen = store_failed_msgs("q", Message(subject="chosen"))
    store_failed_msgs("q", Message(subject="left alone"))
    page = retry(admin_client, chosen)
    assert "1 delivered" in page.content.decode()
    assert [q.msg.subject for q in fetch_failed_msgs("q")] == ["left alone"]


@pytest.mark.django_db(transaction=True)
def test_retry_now_records_a_failure_on_the_row(admin_client, settings) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.test_admin.failing_handler"}
    key = store_failed_msgs("q", Message(subject="still failing"))
    page = retry(admin_client, key)
    assert "1 still failing" in page.content.decode()
    (item,) = fetch_failed_msgs("q")
    assert item.msg.extra["Attempts"] == 1
    assert "ConnectionError: still down" in item.msg.extra["LastError"]


@pytest.mark.django_db(transaction=True)
def test_retry_now_without_a_handler_says_why(admin_client, settings) -> None:
    settings.DEADLETTER_HANDLERS = {}
    key = store_failed_msgs("q", Message(subject="no handler"))
    page = retry(admin_client, key)
    assert "handler" in page.content.decode()
    assert len(fetch_failed_msgs("q")) == 1
