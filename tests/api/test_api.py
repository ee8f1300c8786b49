"""The REST API's endpoints: reading, parking, deleting and draining over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import cbor2
import pytest
import time_machine
from django.contrib.auth.models import User
from django.db import connection
from rest_framework.test import APIClient

from deadletter.contrib.tasks import capture
from deadletter.drain import QueueLock
from deadletter.queue import fetch_failed_msgs
from deadletter.queue.api import queue_names
from deadletter.queue.claims import sqlite_file
from deadletter.wire import keys
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message
from tests.factories import insert, insert_at, park, parked
from tests.odd_rows import park_odd_rows

pytestmark = pytest.mark.django_db(transaction=True)

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
API = "/api/deadletter"
delivered: list[Message] = []


def deliver(msg: Message) -> None:
    delivered.append(msg)


@pytest.fixture(autouse=True)
def handlers(settings: Any) -> Iterator[None]:
    settings.DEADLETTER_HANDLERS = {"drained": "tests.api.test_api.deliver"}
    delivered.clear()
    yield
    delivered.clear()


def url(name: str, suffix: str = "messages/") -> str:
    return f"{API}/queues/{quote(name, safe='/')}/{suffix}"


# --- reading -------------------------------------------------------------------


def test_queue_list_gives_depth_the_oldest_times_and_the_age_of_the_head(api) -> None:
    parked_at = int((NOW - timedelta(minutes=30)).timestamp()) * 10**9
    for seq, hours_ago in enumerate((5, 1)):
        first_failure = GoTime.from_datetime(NOW - timedelta(hours=hours_ago))
        insert_at(
            "webhook-queue", parked_at + seq, seq, Message(subject="m", queued_at=first_failure)
        )
    with time_machine.travel(NOW, tick=False):
        body = api.get(f"{API}/queues/").json()
    assert body == [
        {
            "name": "webhook-queue",
            "depth": 2,
            "oldest_enqueued_at": "2026-11-29T11:30:00Z",
            "oldest_queued_at": "2026-11-29T07:00:00Z",
            "oldest_age_seconds": 5 * 3600.0,
        }
    ]


def test_one_queue_reads_like_its_entry_in_the_list(api) -> None:
    park("x", queue="a b")
    assert api.get(url("a b", "")).json()["depth"] == 1
    assert api.get(url("empty", "")).json()["depth"] == 0


def test_message_list_pages_by_key_oldest_first_and_ends_with_no_next(api) -> None:
    for i in range(5):
        park(f"m{i}", queue="q")
    first = api.get(url("q"), {"limit": 2}).json()
    assert [r["messages"][0]["subject"] for r in first["results"]] == ["m0", "m1"]
    second = api.get(first["next"]).json()
    assert [r["messages"][0]["subject"] for r in second["results"]] == ["m2", "m3"]
    third = api.get(second["next"]).json()
    assert [r["messages"][0]["subject"] for r in third["results"]] == ["m4"]
    assert third["next"] is None


def test_a_page_is_capped(api) -> None:
    response = api.get(url("q"), {"limit": 201})
    assert response.status_code == 400
    assert "limit" in response.json()


@pytest.mark.parametrize(
    ("query", "field"),
    [({"limit": "0"}, "limit"), ({"limit": "many"}, "limit"), ({"after": "zz"}, "after")],
)
def test_bad_paging_parameters_are_400(api, query: dict, field: str) -> None:
    response = api.get(url("q"), query)
    assert response.status_code == 400
    assert field in response.json()


def test_an_after_key_of_another_queue_is_a_place_in_key_order(api) -> None:
    """Any key is schema-valid for `after` (issue 44): one sorting after the queue
    is past its end, one before it starts from its first row."""
    (other,) = park("x", queue="other")
    (mine,) = park("y", queue="a")
    response = api.get(url("q"), {"after": other.hex()})
    assert response.status_code == 200 and response.json()["results"] == []
    assert [r["key"] for r in api.get(url("other"), {"after": mine.hex()}).json()["results"]] == [
        other.hex()
    ]


def test_listing_writes_nothing_and_shows_a_corrupt_row(api) -> None:
    insert(keys.new_key("q"), b"corrupted cbor data")
    row = api.get(url("q")).json()["results"][0]
    assert row["corrupt"] is True
    assert row["messages"] == []
    assert api.get(url("q")).json()["results"][0]["key"] == row["key"]


def test_a_row_over_the_size_limit_is_shown_as_too_large_without_decoding(api, settings) -> None:
    (key,) = park("big", queue="q")
    settings.DEADLETTER_MAX_ROW_BYTES = 10
    body = api.get(f"{API}/messages/{keys.to_text(key)}/").json()
    assert (body["too_large"], body["corrupt"], body["messages"]) == (True, False, [])
    assert body["size"] > 10
    listed = api.get(url("q")).json()["results"][0]
    assert listed["too_large"] is True
    assert api.delete(f"{API}/messages/{keys.to_text(key)}/").status_code == 204


def test_message_detail_by_hex_key(api) -> None:
    (key,) = park("detail", queue="q")
    body = api.get(f"{API}/messages/{keys.to_text(key)}/").json()
    assert body["key"] == key.hex()
    assert body["queue"] == "q"
    assert body["legacy"] is False
    assert body["messages"][0]["subject"] == "detail"


def test_unknown_key_is_404(api) -> None:
    assert api.get(f"{API}/messages/{keys.new_key('q').hex()}/").status_code == 404


@pytest.mark.parametrize("bad", ["abc", "zz", "ABCD", "00" * (keys.MAX_ADDRESSABLE_KEY_BYTES + 1)])
def test_malformed_key_is_400_naming_the_key(api, bad: str) -> None:
    response = api.get(f"{API}/messages/{bad}/")
    assert response.status_code == 400
    assert "key" in response.json()


# --- queue names of any text --------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "a/b",
        "/lead",
        "trail/",
        "a//b",
        "x/messages",
        "y/drain",
        "100%",
        "50%2F",
        "two words",
        "čćžšđ 名前",
        "line\nbreak",
        "?#&=+",
    ],
)
def test_any_queue_name_is_reachable(api, name: str) -> None:
    response = api.post(url(name), {"subject": "hello"}, format="json")
    assert response.status_code == 201, response.content
    page = api.get(url(name)).json()
    assert [r["messages"][0]["subject"] for r in page["results"]] == ["hello"]
    assert page["results"][0]["queue"] == name
    assert parked(name) == ["hello"]
    assert name in [q["name"] for q in api.get(f"{API}/queues/").json()]


def test_the_next_link_of_a_name_with_a_slash_stays_in_the_queue(api) -> None:
    for i in range(3):
        park(f"m{i}", queue="a/b")
    park("other", queue="a")
    first = api.get(url("a/b"), {"limit": 2}).json()
    rest = api.get(first["next"]).json()
    assert [r["messages"][0]["subject"] for r in rest["results"]] == ["m2"]


@pytest.mark.parametrize(
    ("path", "why"),
    [
        (f"{API}/queues//messages/", "must not be empty"),
        (f"{API}/queues/a%00b/messages/", "NUL"),
        (f"{API}/queues/{'x' * 256}/messages/", "255"),
        (f"{API}/queues/{'é' * 128}/messages/", "255"),
    ],
)
def test_a_bad_queue_name_is_400_naming_it_and_stores_nothing(api, path: str, why: str) -> None:
    for response in (api.get(path), api.post(path, {"subject": "s"}, format="json")):
        assert response.status_code == 400
        assert why in str(response.json()["name"])
    assert queue_names() == []


# --- parking ---------------------------------------------------------------------------


def test_park_answers_201_with_the_key_and_its_location(api) -> None:
    message = {
        "timestamp": "2026-11-29T13:00:00.123456789+01:00",
        "queued_at": "2026-11-29T12:00:00.5Z",
        "username": "u@skole.hr",
        "subject": "Ocjena",
        "descriptions": ["a", " b "],
        "fields": [],
        "skip_recipients": None,
        "code": 3,
    }
    response = api.post(url("q"), message, format="json")
    assert response.status_code == 201
    key = response.json()["key"]
    assert response["Location"] == f"http://testserver{API}/messages/{key}/"
    assert response.json() == {"key": key, "queue": "q", "url": response["Location"]}
    [queued] = fetch_failed_msgs("q")
    assert queued.key.hex() == key
    assert queued.msg.timestamp.format() == "2026-11-29T13:00:00.123456789+01:00"
    assert queued.msg.descriptions == ["a", " b "]
    assert queued.msg.fields == []
    assert queued.msg.skip_recipients is None
    shown = api.get(response["Location"]).json()["messages"][0]
    assert {k: shown[k] for k in message} == message
    assert shown["code_name"] == "FINAL_GRADE"


@pytest.mark.parametrize(
    ("codes", "shown"),
    [({}, None), ({3: "ORDER_SHIPPED"}, "ORDER_SHIPPED"), ({0: "OTHER"}, None)],
)
def test_code_name_is_the_projects_name_for_the_code_or_null(
    api, settings, codes: dict[int, str], shown: str | None
) -> None:
    settings.DEADLETTER_EVENT_CODES = codes
    response = api.post(url("q"), {"code": 3}, format="json")
    message = api.get(response["Location"]).json()["messages"][0]
    assert (message["code"], message["code_name"]) == (3, shown)


def test_park_stamps_the_first_failure_when_none_is_given(api) -> None:
    with time_machine.travel(NOW, tick=False):
        assert api.post(url("q"), {}, format="json").status_code == 201
    assert fetch_failed_msgs("q")[0].msg.queued_at.format() == "2026-11-29T12:00:00Z"


def test_park_keeps_unknown_keys_and_special_values(api) -> None:
    body = {
        "subject": "s",
        "Tags": [1, "two"],
        "extra": {
            "Score": {"$float": "NaN"},
            "Blob": {"$bytes": "AAE="},
            "Big": {"$int": "1" + "0" * 30},
        },
    }
    response = api.post(url("q"), body, format="json")
    assert response.status_code == 201, response.json()
    extra = fetch_failed_msgs("q")[0].msg.extra
    assert extra["Tags"] == [1, "two"]
    assert extra["Blob"] == b"\x00\x01"
    assert extra["Big"] == cbor2.CBORTag(2, (10**30).to_bytes(13, "big"))  # a CBOR bignum
    assert extra["Score"] != extra["Score"]  # NaN
    shown = api.get(response["Location"]).json()["messages"][0]["extra"]
    assert shown == {**body["extra"], "Tags": [1, "two"]}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"subject": 12}, "subject"),
        ({"username": None}, "username"),
        ({"code": "1"}, "code"),
        ({"code": True}, "code"),
        ({"code": 1.5}, "code"),
        ({"code": 2**63}, "code"),
        ({"descriptions": "one"}, "descriptions"),
        ({"fields": [1]}, "fields"),
        ({"timestamp": "2026-11-29 12:00:00"}, "timestamp"),
        ({"timestamp": "2026-11-29T12:00:00.1234567890Z"}, "timestamp"),
        ({"queued_at": "2026-02-30T12:00:00Z"}, "queued_at"),
        ({"queued_at": 1700000000}, "queued_at"),
        ({"extra": []}, "extra"),
        ({"extra": {"SUBJECT": "would be read as the subject"}}, "extra"),
        ({"extra": {"x": {"$float": "nan"}}}, "extra"),
        ({"extra": {"x": {"$nope": 1}}}, "extra"),
        ({"extra": {"x": {"$bytes": "not base64!"}}}, "extra"),
        ({"Other": 1, "extra": {"Other": 2}}, "extra"),
    ],
)
def test_park_refuses_wrong_types_with_a_field_error_and_stores_nothing(
    api, body: dict, field: str
) -> None:
    response = api.post(url("q"), body, format="json")
    assert response.status_code == 400
    assert field in response.json(), response.json()
    assert queue_names() == []


@pytest.mark.parametrize(
    "raw",
    [b"{", b'{"subject": NaN}', b"[]", b'"text"', b"\xff\xfe", b"", b'{"a": 1} x'],
)
def test_park_refuses_a_body_that_is_not_one_json_object(api, raw: bytes) -> None:
    response = api.generic("POST", url("q"), raw, content_type="application/json")
    assert response.status_code == 400
    assert "payload" in response.json()
    assert queue_names() == []


def test_park_refuses_a_payload_over_the_limit(api, settings) -> None:
    settings.DEADLETTER_MAX_MESSAGE_BYTES = 1000
    assert api.post(url("q"), {"subject": "x" * 900}, format="json").status_code == 201
    response = api.post(url("q"), {"subject": "x" * 1000}, format="json")
    assert response.status_code == 400
    assert "payload" in response.json()
    assert len(fetch_failed_msgs("q")) == 1


def test_the_default_limit_is_one_mebibyte(api) -> None:
    response = api.post(url("q"), {"subject": "x" * (1 << 20)}, format="json")
    assert response.status_code == 400
    assert "1048576" in str(response.json()["payload"])


def test_park_takes_only_json(api) -> None:
    response = api.post(url("q"), {"subject": "s"})  # multipart form
    assert response.status_code == 415
    assert queue_names() == []


# --- deleting --------------------------------------------------------------------------


def test_delete_answers_204_then_404(api) -> None:
    (key,) = park("gone", queue="q")
    park("kept", queue="q")
    assert api.delete(f"{API}/messages/{key.hex()}/").status_code == 204
    assert parked("q") == ["kept"]
    assert api.delete(f"{API}/messages/{key.hex()}/").status_code == 404


def test_delete_of_a_malformed_key_is_400(api) -> None:
    assert api.delete(f"{API}/messages/xyz/").status_code == 400


def test_delete_answers_503_when_the_database_failed(unreachable_db) -> None:
    client = APIClient()
    client.force_authenticate(User(username="root", is_superuser=True, is_active=True))
    response = client.delete(f"{API}/messages/{keys.new_key('q').hex()}/")
    assert response.status_code == 503
    assert "database" in response.json()["detail"]


def test_reads_answer_503_when_the_database_failed(unreachable_db) -> None:
    client = APIClient()
    client.force_authenticate(User(username="root", is_superuser=True, is_active=True))
    assert client.get(f"{API}/queues/q/messages/").status_code == 503


# --- draining --------------------------------------------------------------------------


def test_drain_hands_messages_to_the_handler_and_answers_the_report(api) -> None:
    for i in range(3):
        park(f"m{i}", queue="drained")
    response = api.post(url("drained", "drain/"), {"limit": 2}, format="json")
    assert response.status_code == 200
    report = response.json()
    assert report["queues"] == ["drained"]
    assert report["delivered"] == 2
    assert report["dropped"] == {"expired": 0, "corrupt": 0, "permanent": 0, "max_attempts": 0}
    assert [m.subject for m in delivered] == ["m0", "m1"]
    assert parked("drained") == ["m2"]


def test_drain_leaves_a_waiting_message_unless_asked_to_ignore_the_backoff(api, settings) -> None:
    from deadletter.drain import Drainer

    settings.DEADLETTER_HANDLERS = {
        "drained": {"handler": "tests.factories.failing_handler", "backoff": [600, 600]}
    }
    park("m", queue="drained")
    Drainer().run()  # fails: due again in ten minutes
    settings.DEADLETTER_HANDLERS = {
        "drained": {"handler": "tests.api.test_api.deliver", "backoff": [600, 600]}
    }
    report = api.post(url("drained", "drain/")).json()
    assert (report["delivered"], report["waiting"], report["paused"]) == (0, 1, [])
    assert report["next_due"] is not None and delivered == []
    report = api.post(url("drained", "drain/"), {"ignore_backoff": True}, format="json").json()
    assert (report["delivered"], [m.subject for m in delivered]) == (1, ["m"])
    assert parked("drained") == []


@pytest.mark.parametrize("value", ["yes please", 3, None])
def test_drain_ignore_backoff_is_a_boolean(api, value: Any) -> None:
    response = api.post(url("drained", "drain/"), {"ignore_backoff": value}, format="json")
    assert response.status_code == 400 and "ignore_backoff" in response.json()


def test_drain_without_a_body_uses_the_default_limit(api) -> None:
    park("m", queue="drained")
    assert api.post(url("drained", "drain/")).json()["delivered"] == 1


@pytest.mark.parametrize("limit", [0, 1001, "5", None])
def test_drain_limit_is_capped_and_an_integer(api, limit: Any) -> None:
    park("m", queue="drained")
    response = api.post(url("drained", "drain/"), {"limit": limit}, format="json")
    assert response.status_code == 400
    assert "limit" in response.json()
    assert parked("drained") == ["m"]


def test_drain_of_a_queue_without_a_handler_is_409(api) -> None:
    park("m", queue="unhandled")
    response = api.post(url("unhandled", "drain/"))
    assert response.status_code == 409
    assert "no handler" in response.json()["detail"]
    assert parked("unhandled") == ["m"]


@pytest.mark.skipif(connection.vendor != "sqlite", reason="only SQLite keeps one drain a queue")
def test_drain_is_409_while_another_drain_holds_the_queue(api) -> None:
    park("m", queue="drained")
    db_file = sqlite_file()
    assert db_file is not None
    with QueueLock(db_file, ["drained"]):
        response = api.post(url("drained", "drain/"))
    assert response.status_code == 409
    assert "being drained" in response.json()["detail"]
    assert parked("drained") == ["m"]


def test_rows_with_odd_keys_and_values_read_and_delete_without_a_server_error(api) -> None:
    odd = park_odd_rows("q")
    assert api.get(f"{API}/queues/").status_code == 200
    assert api.get(url("q")).status_code == 200
    for key in odd:
        detail = f"{API}/messages/{keys.to_text(key)}/"
        assert api.get(detail).status_code == 200, key
        assert api.delete(detail).status_code == 204, key
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM deadletter_queuedmessage")
        assert cursor.fetchone()[0] == 0


# --- keys an integration reserves ------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"subject": "hi", "Task": "myapp.tasks.dangerous", "TaskArgs": ["any argument"]},
        {"subject": "hi", "extra": {"Task": "myapp.tasks.dangerous", "TaskArgs": []}},
    ],
    ids=["top level", "in extra"],
)
def test_park_refuses_a_task_s_keys_naming_them_and_who_reserves_them(api, body: dict) -> None:
    response = api.post(url("tasks.default"), body, format="json")

    assert response.status_code == 400
    assert response.json()["extra"] == [
        f"'Task', 'TaskArgs' reserved by {capture.APP}, which alone parks them"
    ]
    assert queue_names() == []


# --- a first failure in the future -------------------------------------------------


@pytest.mark.parametrize(
    "queued_at",
    ["9999-12-15T00:00:00Z", "9999-12-31T23:00:00-24:00", "2026-11-29T12:05:01Z"],
    ids=["year 9999", "offset -24:00", "just past the skew"],
)
def test_park_refuses_a_first_failure_in_the_future_with_400_naming_the_field(
    api, queued_at: str
) -> None:
    with time_machine.travel(NOW, tick=False):
        response = api.post(url("q"), {"queued_at": queued_at}, format="json")
    assert response.status_code == 400
    assert response.json() == {
        "queued_at": [
            f"queued_at {queued_at} is in the future: a first failure may be at most "
            "5 minutes ahead of this server's clock"
        ]
    }
    assert queue_names() == []


def test_park_takes_a_first_failure_within_the_clock_skew(api) -> None:
    with time_machine.travel(NOW, tick=False):
        response = api.post(url("q"), {"queued_at": "2026-11-29T12:05:00Z"}, format="json")
    assert response.status_code == 201
    assert fetch_failed_msgs("q")[0].msg.queued_at.format() == "2026-11-29T12:05:00Z"


# --- many queues and which the API may make ------------------------------------


def test_the_queue_list_is_paged_by_name_with_a_next_link(api) -> None:
    from tests.reports.many_queues import park_one_row_queues

    names = park_one_row_queues(5)
    first = api.get(f"{API}/queues/", {"limit": 2})
    assert [q["name"] for q in first.json()] == names[:2]
    link = first["Link"]
    assert link.endswith('>; rel="next"')
    second = api.get(link[1 : link.index(">")])
    assert [q["name"] for q in second.json()] == names[2:4]
    last = api.get(second["Link"][1 : second["Link"].index(">")])
    assert [q["name"] for q in last.json()] == names[4:]
    assert "Link" not in last


def test_a_queue_list_page_asks_the_same_statements_at_3000_queues(api) -> None:
    from django.test.utils import CaptureQueriesContext

    from tests.reports.many_queues import park_one_row_queues

    def listed() -> tuple[int, int]:
        with CaptureQueriesContext(connection) as ctx:
            body = api.get(f"{API}/queues/").json()
        return len(ctx.captured_queries), len(body)

    park_one_row_queues(60)
    few = listed()
    park_one_row_queues(3000, prefix="spam-x")
    assert listed() == few
    assert few[1] == 50


@pytest.mark.parametrize("after", ["a\x00b", "x" * 256])
def test_a_queue_list_page_after_a_name_no_queue_can_have_is_a_400(api, after: str) -> None:
    response = api.get(f"{API}/queues/", {"after": after})
    assert response.status_code == 400
    assert "after" in response.json()


def test_the_api_parks_only_into_queues_the_setting_allows(api, settings) -> None:
    settings.DEADLETTER_API_QUEUES = ["webhook-*", "mail"]
    assert api.post(url("webhook-orders"), {"subject": "a"}, format="json").status_code == 201
    assert api.post(url("mail"), {"subject": "b"}, format="json").status_code == 201
    refused = api.post(url("spam-1"), {"subject": "c"}, format="json")
    assert refused.status_code == 400
    (problem,) = refused.json()["name"]
    assert "spam-1" in problem and "DEADLETTER_API_QUEUES" in problem and "'webhook-*'" in problem
    assert queue_names() == ["mail", "webhook-orders"]


def test_any_queue_name_may_be_parked_into_when_the_setting_is_unset(api, settings) -> None:
    settings.DEADLETTER_API_QUEUES = None
    assert api.post(url("anything-at-all"), {"subject": "a"}, format="json").status_code == 201
