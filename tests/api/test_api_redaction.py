"""Redacted values through the API (`DEADLETTER_REDACT`): masked with their length
for a viewer, as they are for a holder of view_unredacted_queuedmessage, in rows,
a message, the search and the archive."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from rest_framework.test import APIClient

from deadletter.drain import Drainer
from deadletter.models import Redrive
from deadletter.queue import archive
from deadletter.wire import keys
from tests.factories import BILLING_REDACT, CARD, EMAIL, park, park_refund

pytestmark = pytest.mark.django_db

API = "/api/deadletter"
VIEWER = ("view_queuedmessage", "view_archivedmessage")
HOLDER = (*VIEWER, "view_unredacted_queuedmessage")


@pytest.fixture(autouse=True)
def redact(settings: Any) -> None:
    settings.DEADLETTER_REDACT = BILLING_REDACT


def client_with(codenames: tuple[str, ...]) -> APIClient:
    user = User.objects.create_user(f"user{len(codenames)}")
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client = APIClient()
    client.force_login(user)
    return client


def shown(body: dict[str, Any]) -> tuple[Any, ...]:
    (msg,) = body["messages"]
    return msg["username"], msg["fields"], msg["extra"]["CeleryKwargs"]["email"]


MASKED = ("••• (15)", ["••• (16)", "12/30"], "••• (15)")
PLAIN = (EMAIL, [CARD, "12/30"], EMAIL)


@pytest.mark.parametrize(("codenames", "expected"), [(VIEWER, MASKED), (HOLDER, PLAIN)])
def test_a_message_and_a_queues_rows(codenames: tuple[str, ...], expected: Any) -> None:
    key = park_refund()
    api = client_with(codenames)
    assert shown(api.get(f"{API}/messages/{keys.to_text(key)}/").json()) == expected
    (row,) = api.get(f"{API}/queues/billing.refunds/messages/").json()["results"]
    assert shown(row) == expected


@pytest.mark.parametrize(("codenames", "expected"), [(VIEWER, MASKED), (HOLDER, PLAIN)])
def test_an_archived_entry_and_the_archive_list(codenames: tuple[str, ...], expected: Any) -> None:
    key = park_refund()
    archive.discard(key, actor="alice")
    api = client_with(codenames)
    assert shown(api.get(f"{API}/archive/{keys.to_text(key)}/").json()) == expected
    (entry,) = api.get(f"{API}/archive/").json()["results"]
    assert shown(entry) == expected


def test_the_search_never_matches_a_redacted_value_for_a_viewer() -> None:
    park_refund()
    park("ada wrote", queue="billing.refunds", username="someone")

    def subjects(api: APIClient, q: str, path: str) -> list[str]:
        results = api.get(path, {"q": q}).json()["results"]
        return [row["messages"][0]["subject"] for row in results]

    viewer, holder = client_with(VIEWER), client_with(HOLDER)
    for path in (f"{API}/messages/", f"{API}/queues/billing.refunds/messages/"):
        assert subjects(viewer, CARD, path) == []
        assert subjects(holder, CARD, path) == ["refund failed"]
        assert subjects(viewer, "ada", path) == ["ada wrote"]
        assert subjects(holder, "ada", path) == ["refund failed", "ada wrote"]


@pytest.mark.parametrize(
    "change", [{"username": "mallory"}, {"fields": ["x"]}, {"extra": {"card_number": "4000"}}]
)
def test_an_edit_of_a_redacted_value_is_refused_to_a_viewer(settings: Any, change: Any) -> None:
    settings.DEADLETTER_HANDLERS = {
        "billing.refunds": {"handler": "tests.factories.ok_handler", "editable": True}
    }
    key = park_refund()
    url = f"{API}/messages/{keys.to_text(key)}/"
    viewer = client_with((*VIEWER, "change_queuedmessage"))
    holder = client_with((*HOLDER, "change_queuedmessage"))
    etag = viewer.get(url)["ETag"]
    refused = viewer.patch(url, change, format="json", HTTP_IF_MATCH=etag)
    assert refused.status_code == 403
    assert "Redacted" in refused.json()["detail"]
    allowed = viewer.patch(url, {"subject": "retried"}, format="json", HTTP_IF_MATCH=etag)
    assert allowed.status_code == 200
    assert shown(allowed.json()) == MASKED
    etag = holder.get(url)["ETag"]
    assert holder.patch(url, change, format="json", HTTP_IF_MATCH=etag).status_code == 200


def test_a_redrive_planned_by_a_viewer_never_matches_a_redacted_value(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"billing.refunds": "tests.factories.ok_handler"}
    park_refund()
    park("ada wrote", queue="billing.refunds", username="someone")
    planner = ("redrive_queuedmessage",)
    viewer, holder = client_with((*VIEWER, *planner)), client_with((*HOLDER, *planner))

    def matched(api: APIClient, search: str, dry_run: bool = True) -> Any:
        body = {"queue": "billing.refunds", "search": search, "dry_run": dry_run}
        response = api.post(f"{API}/redrives/", body, format="json")
        assert response.status_code in (200, 201), response.content
        return response.json()

    assert matched(viewer, CARD)["matched"] == 0
    assert matched(holder, CARD)["matched"] == 1
    assert matched(viewer, "ada")["matched"] == 1  # the unmasked subject still matches
    stored = matched(viewer, CARD, dry_run=False)
    assert Redrive.objects.get(pk=stored["id"]).reveal is False


@pytest.mark.parametrize(("codenames", "address"), [(VIEWER, "••• (15)"), (HOLDER, EMAIL)])
def test_an_error_quoting_a_redacted_value(
    settings: Any, codenames: tuple[str, ...], address: str
) -> None:
    """The LastError, the attempts' errors and the archive's last error quote the
    address as the user may see it."""
    settings.DEADLETTER_HANDLERS = {"billing.refunds": "tests.factories.refusing_handler"}
    key = park_refund()
    Drainer().run()
    error = f"RecipientRefused: <{address}> refused: 550 5.1.1 no such user"
    api = client_with(codenames)
    body = api.get(f"{API}/messages/{keys.to_text(key)}/").json()
    assert body["messages"][0]["extra"]["LastError"] == error
    assert [a["error"] for a in body["attempts_history"]] == [error]
    (row,) = api.get(f"{API}/messages/").json()["results"]
    assert row["messages"][0]["extra"]["LastError"] == error
    archive.discard(key, actor="alice")
    entry = api.get(f"{API}/archive/{keys.to_text(key)}/").json()
    assert entry["last_error"] == error
    assert [a["error"] for a in entry["attempts_history"]] == [error]
    (listed,) = api.get(f"{API}/archive/").json()["results"]
    assert listed["last_error"] == error
