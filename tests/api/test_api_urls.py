"""Text the API's routes capture (queue names, keys) is the URL decoded once, and
a 400 naming it when those bytes are not UTF-8: never a queue named `%FF`."""

from __future__ import annotations

from io import BytesIO

import pytest
from django.core.handlers.asgi import ASGIRequest
from rest_framework.test import APIClient

from deadletter.api.converters import captured_utf8
from deadletter.queue.api import queue_names

pytestmark = pytest.mark.django_db(transaction=True)

API = "/api/deadletter"
ROUTES = [
    ("get", "queues/{}/", "name"),
    ("get", "queues/{}/messages/", "name"),
    ("post", "queues/{}/messages/", "name"),
    ("post", "queues/{}/drain/", "name"),
    ("get", "messages/{}/", "key"),
    ("delete", "messages/{}/", "key"),
]


def park(api: APIClient, escaped: str, **extra: str) -> tuple[int, dict[str, list[str]]]:
    response = api.post(f"{API}/queues/{escaped}/messages/", {}, format="json", **extra)
    return response.status_code, response.json()


@pytest.mark.parametrize(("method", "route", "field"), ROUTES)
def test_a_byte_that_is_not_utf8_is_400_naming_the_part(api, method, route, field) -> None:
    response = getattr(api, method)(f"{API}/{route.format('%ff')}", {}, format="json")
    assert response.status_code == 400
    assert "not UTF-8" in response.json()[field][0]
    assert queue_names() == []


@pytest.mark.parametrize("escaped", ["%80", "a%c3", "%c0%af", "%ed%a0%80", "%c3%a9%ff"])
def test_every_kind_of_bad_utf8_is_refused(api, escaped: str) -> None:
    assert park(api, escaped)[0] == 400
    assert queue_names() == []


def test_an_escaped_percent_is_decoded_once(api) -> None:
    status, body = park(api, "%25ff")
    assert status == 201
    assert body["queue"] == "%ff"
    assert queue_names() == ["%ff"]
    page = api.get(f"{API}/queues/%25ff/messages/").json()
    assert [row["queue"] for row in page["results"]] == ["%ff"]


def test_utf8_text_is_decoded_once(api) -> None:
    assert park(api, "%c3%a9%2541")[1]["queue"] == "é%41"


@pytest.mark.parametrize("variable", ["RAW_URI", "REQUEST_URI"])
def test_with_the_path_the_client_sent_the_two_spellings_are_told_apart(api, variable) -> None:
    literal = f"{API}/queues/%25FF/messages/"
    assert park(api, "%25FF", **{variable: f"{literal}?x=1"})[1]["queue"] == "%FF"
    assert park(api, "%ff", **{variable: f"{API}/queues/%ff/messages/"})[0] == 400
    assert queue_names() == ["%FF"]


def test_without_it_django_s_escape_for_a_bad_byte_is_refused_as_one(api) -> None:
    assert park(api, "%25FF")[0] == 400
    assert park(api, "%25fF")[0] == 201  # not what Django writes: the name %fF
    assert queue_names() == ["%fF"]


def asgi_request(path: str, raw_path: bytes) -> ASGIRequest:
    scope = {"type": "http", "method": "GET", "path": path, "raw_path": raw_path, "headers": []}
    return ASGIRequest(scope, BytesIO())


def test_under_asgi_the_raw_path_decides() -> None:
    # Servers decode the path with replacement (uvicorn): U+FFFD for %ff.
    assert not captured_utf8(asgi_request("/queues/\ufffd/", b"/queues/%ff/"), ["\ufffd"])
    assert captured_utf8(asgi_request("/queues/\ufffd/", b"/queues/%ef%bf%bd/"), ["\ufffd"])
    assert captured_utf8(asgi_request("/queues/%FF/", b"/queues/%25FF/"), ["%FF"])
