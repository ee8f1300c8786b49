"""`PATCH messages/{key}/`: an edit guarded by the row's ETag (If-Match), partial,
allowed on an editable queue with the change permission, refused with nothing
written otherwise."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Permission, User
from rest_framework.test import APIClient

from deadletter.contrib.tasks import capture
from deadletter.models import ArchivedMessage
from deadletter.queue import edits
from deadletter.wire import codec
from tests.factories import park, table_rows

pytestmark = pytest.mark.django_db

API = "/api/deadletter"


@pytest.fixture(autouse=True)
def editable(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {
        "q": {"handler": "tests.factories.ok_handler", "editable": True},
        "fixed": "tests.factories.ok_handler",
    }


def message_url(key: bytes) -> str:
    return f"{API}/messages/{key.hex()}/"


def stored(key: bytes) -> bytes:
    return dict(table_rows())[key]


def test_get_gives_an_etag_and_patch_with_it_changes_only_the_fields_given(api) -> None:
    (key,) = park("Ocjena", username="ana", descriptions=["a"], extra={"Site": "x", "N": 1})
    got = api.get(message_url(key))
    etag = got["ETag"]
    assert etag.startswith('"') and etag.endswith('"')
    response = api.patch(
        message_url(key),
        {"subject": "Ocjena: Fizika", "extra": {"Site": "y"}},
        format="json",
        HTTP_IF_MATCH=etag,
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["changed"] == [
        {"field": "subject", "old": "Ocjena", "new": "Ocjena: Fizika"},
        {"field": "extra.Site", "old": "x", "new": "y"},
    ]
    (msg,) = body["messages"]
    assert (msg["subject"], msg["username"], msg["descriptions"]) == (
        "Ocjena: Fizika",
        "ana",
        ["a"],
    )
    assert msg["extra"] == {"Site": "y", "N": 1}
    assert response["ETag"] != etag
    assert api.get(message_url(key))["ETag"] == response["ETag"]
    assert ArchivedMessage.objects.get(key=key).reason == "edited"
    entry = LogEntry.objects.get(object_id=key.hex(), action_flag=CHANGE)
    assert 'subject: "Ocjena" → "Ocjena: Fizika"' in entry.change_message


def test_without_if_match_it_is_428_and_with_a_stale_one_412(api) -> None:
    (key,) = park("first")
    etag = api.get(message_url(key))["ETag"]
    missing = api.patch(message_url(key), {"subject": "x"}, format="json")
    assert missing.status_code == 428
    star = api.patch(message_url(key), {"subject": "x"}, format="json", HTTP_IF_MATCH="*")
    assert star.status_code == 428
    weak = api.patch(message_url(key), {"subject": "x"}, format="json", HTTP_IF_MATCH=f"W/{etag}")
    assert weak.status_code == 412
    first = api.patch(message_url(key), {"subject": "second"}, format="json", HTTP_IF_MATCH=etag)
    assert first.status_code == 200
    after = stored(key)
    stale = api.patch(message_url(key), {"subject": "third"}, format="json", HTTP_IF_MATCH=etag)
    assert stale.status_code == 412
    assert stored(key) == after


def test_a_queue_not_editable_or_a_user_without_change_permission_is_403(api) -> None:
    (fixed,) = park("fixed", queue="fixed")
    etag = api.get(message_url(fixed))["ETag"]
    refused = api.patch(message_url(fixed), {"subject": "x"}, format="json", HTTP_IF_MATCH=etag)
    assert refused.status_code == 403
    assert "not editable" in refused.json()["detail"]

    (key,) = park("guarded")
    viewer = User.objects.create_user("viewer")
    viewer.user_permissions.add(Permission.objects.get(codename="view_queuedmessage"))
    client = APIClient()
    client.force_login(viewer)
    etag = client.get(message_url(key))["ETag"]
    assert (
        client.patch(
            message_url(key), {"subject": "x"}, format="json", HTTP_IF_MATCH=etag
        ).status_code
        == 403
    )
    before = stored(key)
    assert codec.decode(before)[0].subject == "guarded"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"code": "12"}, "code"),
        ({"code": 2**63}, "code"),
        ({"subject": 12}, "subject"),
        ({"queued_at": "2026-11-29T12:00:00Z"}, "queued_at"),
        ({"Attempts": 0}, "Attempts"),
        ({"extra": {"Attempts": 0}}, "extra.Attempts"),
        ({"extra": {capture.TASK_ARGS: [1]}}, f"extra.{capture.TASK_ARGS}"),
        ({"extra": {"Subject": "a field Go would read"}}, "non_field_errors"),
        ({"timestamp": "yesterday"}, "timestamp"),
    ],
)
def test_bad_values_are_400_naming_the_field_and_nothing_is_written(
    api, body: dict, field: str
) -> None:
    (key,) = park("kept", extra={"Attempts": 2})
    before = stored(key)
    etag = api.get(message_url(key))["ETag"]
    response = api.patch(message_url(key), body, format="json", HTTP_IF_MATCH=etag)
    assert response.status_code == 400, response.json()
    assert field in response.json()
    assert stored(key) == before
    assert not ArchivedMessage.objects.exists()


def test_a_row_that_is_gone_is_404(api) -> None:
    response = api.patch(
        message_url(b"q\x00" + bytes(16)), {"subject": "x"}, format="json", HTTP_IF_MATCH='"0"'
    )
    assert response.status_code == 404


def test_the_schema_documents_the_edit(api) -> None:
    paths = api.get(f"{API}/schema/", {"format": "json"}).json()["paths"]
    patch = paths[f"{API}/messages/{{key}}/"]["patch"]
    assert {"200", "400", "403", "404", "412", "428"} <= set(patch["responses"])
    assert "If-Match" in {p["name"] for p in patch["parameters"]}
    get = paths[f"{API}/messages/{{key}}/"]["get"]
    assert "ETag" in get["responses"]["200"]["headers"]


UNKEYED = (hashlib.sha256, hashlib.sha1, hashlib.md5, hashlib.blake2b, hashlib.sha512)


def test_a_viewer_cannot_guess_a_redacted_value_from_the_etag(settings: Any) -> None:
    """The attack: the masked JSON gives every field but the hidden PIN, so a viewer
    encodes each candidate with the app's own codec and compares digests with the
    ETag. The reconstruction is exact (the right PIN gives the stored bytes), yet no
    candidate's digest, of the value or of the key and value, is the ETag."""
    settings.DEADLETTER_REDACT = {"q": ["Pin"]}
    (key,) = park("card blocked", username="ana", extra={"Pin": "4821", "Site": "x"})
    viewer = User.objects.create_user("viewer")
    viewer.user_permissions.add(Permission.objects.get(codename="view_queuedmessage"))
    client = APIClient()
    client.force_login(viewer)
    got = client.get(message_url(key))
    assert got.json()["messages"][0]["extra"]["Pin"] != "4821"
    tag = got["ETag"].strip('"')
    known = codec.decode(stored(key))[0]

    def guess(pin: str) -> bytes:
        return codec.encode_one(known.replace(extra={**known.extra, "Pin": pin}))

    assert guess("4821") == stored(key)
    found = [
        pin
        for pin in (f"{n:04}" for n in range(10_000))
        for value in (guess(pin),)
        for data in (value, key + value, key + b"\x00" + value)
        if any(digest(data).hexdigest().startswith(tag) for digest in UNKEYED)
    ]
    assert found == []


def test_the_etag_is_keyed_with_the_secret_and_a_fallback_still_matches(settings: Any) -> None:
    (key,) = park("first")
    value = stored(key)
    old = edits.etag_of(key, value)
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = (
        "another secret " * 4,
        [settings.SECRET_KEY],
    )
    assert edits.etag_of(key, value) != old
    assert edits.etag_matches(key, value, old)
    assert not edits.etag_matches(key, value + b" ", old)
    (other,) = park("first")
    assert edits.etag_of(other, value) != edits.etag_of(key, value)


def test_a_tag_from_before_a_key_rotation_still_edits(api, settings: Any) -> None:
    (key,) = park("first")
    etag = api.get(message_url(key))["ETag"]
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = (
        "another secret " * 4,
        [settings.SECRET_KEY],
    )
    response = api.patch(message_url(key), {"subject": "second"}, format="json", HTTP_IF_MATCH=etag)
    assert response.status_code == 200, response.json()
    assert codec.decode(stored(key))[0].subject == "second"
