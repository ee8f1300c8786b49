"""The OpenAPI schema (drf-spectacular), its docs page, and the browsable API."""

from __future__ import annotations

import json
import re

import pytest
from django.contrib.staticfiles import finders
from django.test import modify_settings, override_settings
from drf_spectacular.validation import validate_schema
from jsonschema import Draft202012Validator

from tests.factories import park

pytestmark = pytest.mark.django_db(transaction=True)

API = "/api/deadletter"


def schema_auth_names(docs_page: str) -> list[str]:
    """The schemes Swagger UI sends credentials of when it fetches the schema."""
    found = re.search(r"const schemaAuthNames = (.*?);", docs_page, re.DOTALL)
    assert found
    names: list[str] = json.loads(found.group(1))
    return names


def test_the_schema_is_valid_openapi_3_of_this_api_only(api) -> None:
    response = api.get(f"{API}/schema/", {"format": "json"})
    assert response.status_code == 200
    schema = response.json()
    validate_schema(schema)
    assert schema["openapi"].startswith("3.")
    assert sorted(schema["paths"]) == [
        f"{API}/archive/",
        f"{API}/archive/{{key}}/",
        f"{API}/archive/{{key}}/restore/",
        f"{API}/messages/",
        f"{API}/messages/{{key}}/",
        f"{API}/queues/",
        f"{API}/queues/{{name}}/",
        f"{API}/queues/{{name}}/drain/",
        f"{API}/queues/{{name}}/messages/",
        f"{API}/redrives/",
        f"{API}/redrives/{{id}}/",
        f"{API}/redrives/{{id}}/cancel/",
    ]
    assert set(schema["components"]["securitySchemes"]) == {"tokenAuth", "cookieAuth"}


@override_settings(
    REST_FRAMEWORK={
        "DEFAULT_AUTHENTICATION_CLASSES": [
            "rest_framework.authentication.BasicAuthentication",
            "rest_framework.authentication.SessionAuthentication",
        ]
    }
)
def test_the_schema_names_the_projects_authentication(api) -> None:
    schema = api.get(f"{API}/schema/", {"format": "json"}).json()
    validate_schema(schema)
    assert set(schema["components"]["securitySchemes"]) == {"basicAuth", "cookieAuth"}
    park = schema["paths"][f"{API}/queues/{{name}}/messages/"]["post"]
    assert park["security"] == [{"basicAuth": []}, {"cookieAuth": []}]
    docs = api.get(f"{API}/schema/docs/").content.decode()
    assert schema_auth_names(docs) == ["basicAuth", "cookieAuth"]


def test_the_schema_documents_every_answer_of_each_operation(api) -> None:
    paths = api.get(f"{API}/schema/", {"format": "json"}).json()["paths"]
    park = paths[f"{API}/queues/{{name}}/messages/"]["post"]
    assert {"201", "400", "401", "403", "429", "503"} <= set(park["responses"])
    delete = paths[f"{API}/messages/{{key}}/"]["delete"]
    assert {"204", "404", "503"} <= set(delete["responses"])
    drain = paths[f"{API}/queues/{{name}}/drain/"]["post"]
    assert {"200", "400", "409"} <= set(drain["responses"])
    restore = paths[f"{API}/archive/{{key}}/restore/"]["post"]
    assert {"200", "201", "400", "404", "403", "503"} <= set(restore["responses"])
    assert {"200", "400", "403"} <= set(paths[f"{API}/archive/"]["get"]["responses"])


def test_the_docs_page_loads_swagger_ui_from_this_site(api) -> None:
    response = api.get(f"{API}/schema/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in html
    assert f"{API}/schema/" in html
    assert not re.search(r"(src|href)=\"https?://", html), "no asset from another host"
    assert schema_auth_names(html) == ["tokenAuth", "cookieAuth"]
    # Served by the project's static files, like the admin's.
    assert finders.find("drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")


def test_the_docs_page_says_what_is_missing_without_the_sidecar(api) -> None:
    with modify_settings(INSTALLED_APPS={"remove": ["drf_spectacular_sidecar"]}):
        response = api.get(f"{API}/schema/docs/")
    assert response.status_code == 404
    assert "drf_spectacular_sidecar" in response.content.decode()


def test_a_browser_gets_the_browsable_api(api) -> None:
    response = api.get(f"{API}/queues/", HTTP_ACCEPT="text/html")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")


def test_without_rest_framework_installed_a_browser_gets_json_not_a_500(api) -> None:
    with modify_settings(INSTALLED_APPS={"remove": ["rest_framework", "rest_framework.authtoken"]}):
        response = api.get(f"{API}/queues/", HTTP_ACCEPT="text/html,*/*;q=0.8")
        assert response.status_code == 200
        assert response["Content-Type"] == "application/json"
        bad = api.get(f"{API}/messages/zz/", HTTP_ACCEPT="text/html,*/*;q=0.8")
        assert bad.status_code == 400
        assert bad["Content-Type"] == "application/json"


def test_a_browser_not_logged_in_is_sent_to_log_in_and_back_to_the_docs(client, admin_user) -> None:
    docs = f"{API}/schema/docs/"
    response = client.get(docs, headers={"Accept": "text/html,application/xhtml+xml"})
    assert response.status_code == 302
    login = response["Location"]
    assert login.startswith("/admin/login/") and "next=" in login
    page = client.get(login)
    assert page.status_code == 200
    (back,) = re.findall(r'name="next" value="([^"]+)"', page.content.decode())
    logged_in = client.post(
        login, {"username": "admin", "password": "password", "next": back}, follow=True
    )
    assert logged_in.wsgi_request.path == docs and logged_in.status_code == 200


def test_the_schema_documents_the_queue_lists_paging(api) -> None:
    schema = api.get(f"{API}/schema/", {"format": "json"}).json()
    validate_schema(schema)
    listing = schema["paths"][f"{API}/queues/"]["get"]
    assert {p["name"] for p in listing["parameters"]} >= {"after", "limit"}
    assert "Link" in listing["responses"]["200"]["headers"]
    assert listing["responses"]["200"]["content"]["application/json"]["schema"]["type"] == "array"
    assert "400" in listing["responses"]


def test_the_schema_documents_a_messages_attempts_history(api) -> None:
    schema = api.get(f"{API}/schema/", {"format": "json"}).json()
    answer = schema["paths"][f"{API}/messages/{{key}}/"]["get"]["responses"]["200"]
    ref = answer["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    history = schema["components"]["schemas"][ref]["properties"]["attempts_history"]
    attempt = schema["components"]["schemas"][history["items"]["$ref"].rsplit("/", 1)[1]]
    assert sorted(attempt["properties"]) == ["actor", "at", "duration", "error", "outcome"]
    assert attempt["properties"]["duration"]["nullable"] is True
    outcome = attempt["properties"]["outcome"]
    for ref in [*outcome.get("allOf", []), outcome]:
        if "$ref" in ref:
            outcome = schema["components"]["schemas"][ref["$ref"].rsplit("/", 1)[1]]
    assert outcome["enum"] == [
        "failed",
        "timeout",
        "held",
        "permanent",
        "max_attempts",
        "killed",
        "changed",
    ]


# --- what the schema admits is what the API accepts (issue 44, point 11) ---------------


def query_parameters(schema: dict) -> list[tuple[str, str, dict]]:
    """(path, name, schema) of every query parameter of every GET in the schema."""
    found = []
    for path, operations in schema["paths"].items():
        for parameter in operations.get("get", {}).get("parameters", []):
            if parameter["in"] == "query":
                found.append((path, parameter["name"], parameter["schema"]))
    return found


def admits(parameter: dict, value: str) -> bool:
    """Whether a query parameter's schema admits `value` as sent (a string)."""
    if parameter.get("type") == "integer":
        return value.isascii() and value.lstrip("-").isdigit()
    return not list(Draft202012Validator(parameter).iter_errors(value))


def test_every_query_parameter_given_empty_is_answered_as_its_schema_says(api) -> None:
    """DRF takes an empty value in a query string for a missing one: `?reason=` and
    `?after=` were answered 200 where the schema admits no empty string."""
    park("a", queue="q")
    schema = api.get(f"{API}/schema/", {"format": "json"}).json()
    checked = []
    for path, name, parameter in query_parameters(schema):
        url = path.replace("{name}", "q")
        response = api.get(url, {name: ""})
        checked.append((url, name))
        if admits(parameter, ""):
            assert response.status_code == 200, (url, name, response.content)
        else:
            assert response.status_code == 400, (url, name, response.content)
            assert list(response.json()) == [name], (url, name, response.content)
    assert (f"{API}/archive/", "reason") in checked and (f"{API}/messages/", "after") in checked
    assert len(checked) >= 14


@pytest.mark.parametrize(
    "value", ["0-0", "1-1", "9999999999999999999-9999999999999999999", "253402300800000000-1"]
)
def test_every_archive_cursor_the_schema_admits_is_a_place_in_the_archive(api, value) -> None:
    schema = api.get(f"{API}/schema/", {"format": "json"}).json()
    (cursor,) = (p for path, name, p in query_parameters(schema) if name == "cursor")
    assert admits(cursor, value)
    response = api.get(f"{API}/archive/", {"cursor": value})
    assert response.status_code == 200, response.content


@pytest.mark.parametrize("value", ["", "abc", "1-", "-1", "1-2-3", "٣-1", "1" * 20 + "-1"])
def test_an_archive_cursor_outside_the_schema_is_a_400(api, value) -> None:
    schema = api.get(f"{API}/schema/", {"format": "json"}).json()
    (cursor,) = (p for path, name, p in query_parameters(schema) if name == "cursor")
    assert not admits(cursor, value)
    response = api.get(f"{API}/archive/", {"cursor": value})
    assert response.status_code == 400 and list(response.json()) == ["cursor"]


def test_a_key_of_another_queue_is_a_place_in_key_order_not_a_400(api) -> None:
    """Any hex key is schema-valid for `after`: one sorting before the queue starts
    from its first row, one after it is past its end."""
    (first, second) = park("a", "b", queue="q")
    (before,) = park("x", queue="p")
    (past,) = park("y", queue="r")
    listed = api.get(f"{API}/queues/q/messages/", {"after": before.hex()})
    assert listed.status_code == 200
    assert [row["key"] for row in listed.json()["results"]] == [first.hex(), second.hex()]
    beyond = api.get(f"{API}/queues/q/messages/", {"after": past.hex()})
    assert beyond.status_code == 200 and beyond.json() == {"results": [], "next": None}


def test_the_park_says_its_body_is_required(api) -> None:
    schema = api.get(f"{API}/schema/", {"format": "json"}).json()
    park_op = schema["paths"][f"{API}/queues/{{name}}/messages/"]["post"]
    assert park_op["requestBody"]["required"] is True
    assert api.post(f"{API}/queues/q/messages/").status_code == 400


@pytest.mark.parametrize(
    "body", [{"queue": ""}, {"queue": "a\x00b"}, {"queue": "q", "destination": ""}]
)
def test_a_redrive_queue_the_schema_refuses_is_a_400_and_the_schema_says_so(api, body) -> None:
    schema = api.get(f"{API}/schema/", {"format": "json"}).json()
    fields = schema["components"]["schemas"]["RedriveRequestRequest"]["properties"]
    for name, value in body.items():
        if value != "q":
            assert not admits({k: v for k, v in fields[name].items() if k != "nullable"}, value)
    response = api.post(f"{API}/redrives/", body, format="json")
    assert response.status_code == 400


def test_a_stop_after_of_zero_is_refused_and_the_schema_says_its_bound_is_exclusive(api) -> None:
    schema = api.get(f"{API}/schema/", {"format": "json"}).json()
    stop_after = schema["components"]["schemas"]["RedriveRequestRequest"]["properties"][
        "stop_after"
    ]
    assert (stop_after["minimum"], stop_after["exclusiveMinimum"]) == (0, True)
    response = api.post(f"{API}/redrives/", {"queue": "q", "stop_after": 0}, format="json")
    assert response.status_code == 400
    assert "stop_after" in response.json()
