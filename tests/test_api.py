from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.contrib.auth.models import Permission, User

from deadletter import keys
from deadletter.gotime import GoTime
from deadletter.messages import Message
from deadletter.models import QueuedMessage
from deadletter.queue import fetch_failed_msgs, store_failed_msgs

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
API = "/deadletter/api"


def park(queue: str, subject: str, hours_ago: float = 1) -> bytes:
    first_failure = GoTime.from_datetime(NOW - timedelta(hours=hours_ago))
    return store_failed_msgs(queue, Message(subject=subject, queued_at=first_failure))


def test_queue_list_gives_rows_and_the_age_of_the_head(admin_client) -> None:
    park("webhook-queue", "old", hours_ago=5)
    park("webhook-queue", "new", hours_ago=1)
    with time_machine.travel(NOW, tick=False):
        body = admin_client.get(f"{API}/queues/").json()
    assert body == [
        {
            "name": "webhook-queue",
            "rows": 2,
            "oldest_queued_at": "2026-11-29T07:00:00Z",
            "oldest_age_seconds": 5 * 3600.0,
        }
    ]


def test_message_list_pages_by_key_oldest_first(admin_client) -> None:
    for i in range(5):
        park("q", f"m{i}")
    first = admin_client.get(f"{API}/queues/q/messages/", {"limit": 2}).json()
    assert [r["messages"][0]["subject"] for r in first["results"]] == ["m0", "m1"]
    second = admin_client.get(first["next"]).json()
    assert [r["messages"][0]["subject"] for r in second["results"]] == ["m2", "m3"]


def test_listing_writes_nothing(admin_client) -> None:
    QueuedMessage.objects.create(key=b"q", value=b"corrupted cbor data")
    body = admin_client.get(f"{API}/queues/q/messages/").json()
    assert body["results"][0]["corrupt"] is True
    assert QueuedMessage.objects.filter(key=b"q").exists()


def test_message_detail_by_hex_key(admin_client) -> None:
    key = park("q", "detail")
    body = admin_client.get(f"{API}/messages/{keys.to_text(key)}/").json()
    assert body["key"] == key.hex()
    assert body["queue"] == "q"
    assert body["messages"][0]["subject"] == "detail"


def test_unknown_key_is_404(admin_client) -> None:
    assert admin_client.get(f"{API}/messages/{keys.new_key('q').hex()}/").status_code == 404


def test_malformed_key_is_404(admin_client) -> None:
    assert admin_client.get(f"{API}/messages/abc/").status_code == 404


@pytest.mark.parametrize(
    ("query", "field"),
    [({"limit": "0"}, "limit"), ({"limit": "many"}, "limit"), ({"after": "zz"}, "after")],
)
def test_bad_paging_parameters_are_400(admin_client, query: dict, field: str) -> None:
    response = admin_client.get(f"{API}/queues/q/messages/", query)
    assert response.status_code == 400
    assert field in response.json()


def test_after_key_of_another_queue_is_400(admin_client) -> None:
    other = park("other", "x")
    response = admin_client.get(f"{API}/queues/q/messages/", {"after": other.hex()})
    assert response.status_code == 400


def test_delete_dequeues_the_row(admin_client) -> None:
    key = park("q", "gone")
    park("q", "kept")
    assert admin_client.delete(f"{API}/messages/{key.hex()}/").status_code == 204
    assert [q.msg.subject for q in fetch_failed_msgs("q")] == ["kept"]


def test_delete_needs_the_delete_permission(client) -> None:
    staff = User.objects.create_user("staff", password="pw", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_queuedmessage"))
    client.force_login(staff)
    key = park("q", "stays")
    assert client.delete(f"{API}/messages/{key.hex()}/").status_code == 403
    assert len(fetch_failed_msgs("q")) == 1


def test_anonymous_requests_are_refused(client) -> None:
    assert client.get(f"{API}/queues/").status_code in (401, 403)
