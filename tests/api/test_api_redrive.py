"""The redrives' endpoints: plan (or only count) a redrive, list and read them with
their progress, cancel one; every bad value a 400 naming its field, and who may."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.contrib.auth.models import Permission, User
from drf_spectacular.validation import validate_schema
from rest_framework.test import APIClient

from deadletter.models import Redrive
from tests.factories import park

pytestmark = pytest.mark.django_db

API = "/api/deadletter"
REDRIVES = f"{API}/redrives/"


@pytest.fixture(autouse=True)
def handlers(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {
        "webhooks": "tests.factories.ok_handler",
        "spare": "tests.factories.ok_handler",
    }


def plan(api: APIClient, **body: Any) -> Any:
    return api.post(REDRIVES, {"queue": "webhooks", **body}, format="json")


def test_a_post_plans_a_redrive_of_what_matches_and_answers_it(api) -> None:
    park("invoice paid", "invoice paid", "refund", queue="webhooks")
    response = plan(api, search="invoice", rate=5, ramp=[1, 5], stop_after=20, concurrency=4)
    assert response.status_code == 201
    body = response.json()
    redrive = Redrive.objects.get()
    assert body["id"] == redrive.pk
    assert response["Location"] == body["url"]
    assert body["url"].endswith(f"{REDRIVES}{redrive.pk}/")
    assert {k: body[k] for k in ("queue", "search", "matched", "remaining", "status")} == {
        "queue": "webhooks",
        "search": "invoice",
        "matched": 2,
        "remaining": 2,
        "status": "planned",
    }
    assert (body["rate"], body["ramp"], body["stop_after"], body["concurrency"]) == (
        5.0,
        [1, 5],
        20.0,
        4,
    )
    assert body["started_by"] == "root"
    assert body["destination"] is None
    entry = LogEntry.objects.get(object_id=str(redrive.pk))
    assert (entry.action_flag, entry.user.username) == (ADDITION, "root")
    assert "2 message(s)" in entry.get_change_message()


def test_a_dry_run_answers_the_plan_and_stores_nothing(api) -> None:
    park("a", "b", "c", queue="webhooks")
    response = plan(api, dry_run=True, after="2000-01-01T00:00:00Z")
    assert response.status_code == 200
    body = response.json()
    assert (body["id"], body["url"], body["matched"], body["status"]) == (None, None, 3, "planned")
    assert not Redrive.objects.exists()
    assert not LogEntry.objects.exists()


def test_a_move_names_its_destination(api) -> None:
    park("a", queue="webhooks")
    body = plan(api, destination="spare").json()
    assert (body["destination"], body["matched"]) == ("spare", 1)


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"search": 'subject:"unclosed'}, "search", "a quote is not closed"),
        ({"search": "after:someday"}, "search", "after: wants an ISO date"),
        ({"search": 7}, "search", "Expected a string"),
        ({"queue": ""}, "queue", "must not be empty"),
        ({"queue": "a\0b"}, "queue", "NUL"),
        ({"queue": None}, "queue", "null"),
        ({"destination": "webhooks"}, "destination", "the queue itself"),
        ({"destination": "x" * 256}, "destination", "the limit is 255"),
        ({"rate": 0}, "rate", "rate must be above 0"),
        ({"rate": "fast"}, "rate", "A valid number is required."),
        ({"ramp": [1, 0]}, "ramp", "above 0"),
        ({"ramp": ["5"]}, "ramp", "Expected an integer"),
        ({"ramp": "1,5"}, "ramp", "Expected a list"),
        ({"stop_after": 0}, "stop_after", "above 0"),
        ({"stop_after": 101}, "stop_after", "at most 100"),
        ({"concurrency": 0}, "concurrency", "between 1 and"),
        ({"concurrency": True}, "concurrency", "Expected an integer"),
        ({"after": "yesterday"}, "after", "Datetime has wrong format"),
        (
            {"after": "2026-12-02T00:00:00Z", "before": "2026-12-01T00:00:00Z"},
            "before",
            "must be earlier than before",
        ),
        ({"ignore_backoff": "maybe"}, "ignore_backoff", "Must be a valid boolean."),
    ],
)
def test_each_bad_value_is_a_400_naming_its_field(api, body, field, says) -> None:
    park("m", queue="webhooks")
    response = plan(api, **body)
    assert response.status_code == 400
    errors = response.json()
    assert field in errors, errors
    assert says in str(errors[field]), errors
    assert not Redrive.objects.exists()


def test_what_only_the_engine_can_judge_is_a_400_too(api) -> None:
    park("m", queue="unserved")
    response = plan(api, queue="unserved")
    assert response.status_code == 400
    assert "DEADLETTER_HANDLERS" in str(response.json()["non_field_errors"])
    moved_and_ramped = plan(api, destination="spare", ramp=[1, 5])
    assert moved_and_ramped.status_code == 400
    assert "a move calls no handler" in str(moved_and_ramped.json()["non_field_errors"])
    assert not Redrive.objects.exists()


def test_a_body_that_is_not_an_object_is_a_400(api) -> None:
    response = api.post(REDRIVES, "[1]", content_type="application/json")
    assert response.status_code == 400
    assert "payload" in response.json()


def test_the_list_pages_newest_first_and_filters_by_status(api) -> None:
    park("m", queue="webhooks")
    made = [plan(api).json()["id"] for _ in range(5)]
    Redrive.objects.filter(pk=made[0]).update(status=Redrive.Status.FINISHED)
    first = api.get(REDRIVES, {"limit": 2}).json()
    assert [r["id"] for r in first["results"]] == made[::-1][:2]
    second = api.get(first["next"]).json()
    assert [r["id"] for r in second["results"]] == made[::-1][2:4]
    third = api.get(second["next"]).json()
    assert [r["id"] for r in third["results"]] == [made[0]]
    assert third["next"] is None
    finished = api.get(REDRIVES, {"status": "finished"}).json()
    assert [r["id"] for r in finished["results"]] == [made[0]]
    assert api.get(REDRIVES, {"status": "sleeping"}).status_code == 400
    assert api.get(REDRIVES, {"limit": 0}).status_code == 400


def test_one_redrive_reads_with_its_progress_and_an_unknown_id_is_404(api) -> None:
    park("a", "b", "c", "d", queue="webhooks")
    made = plan(api).json()
    Redrive.objects.filter(pk=made["id"]).update(
        status=Redrive.Status.RUNNING, delivered=2, failed=1, remaining=1
    )
    body = api.get(made["url"]).json()
    assert (body["status"], body["matched"], body["delivered"], body["failed"]) == (
        "running",
        4,
        2,
        1,
    )
    assert body["remaining"] == 1
    assert api.get(f"{REDRIVES}{10**30}/").status_code == 404
    assert api.get(f"{REDRIVES}x1/").status_code == 404
    missing = api.get(f"{REDRIVES}99999/")
    assert missing.status_code == 404
    assert missing.json() == {"detail": "No redrive with that id."}


def test_a_finished_redrive_says_why_each_message_was_left(api) -> None:
    park("a", "b", "c", "d", queue="webhooks")
    made = plan(api).json()
    Redrive.objects.filter(pk=made["id"]).update(
        status=Redrive.Status.FINISHED, delivered=1, remaining=3, gone=1, held=1, waiting=1
    )
    body = api.get(made["url"]).json()
    left = {k: body[k] for k in ("remaining", "gone", "held", "waiting", "conflicts")}
    assert left == {"remaining": 3, "gone": 1, "held": 1, "waiting": 1, "conflicts": 0}


def test_cancel_stops_a_planned_redrive_once_and_a_finished_one_is_409(api) -> None:
    park("a", queue="webhooks")
    made = plan(api).json()
    cancelled = api.post(f"{made['url']}cancel/")
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    again = api.post(f"{made['url']}cancel/")
    assert again.status_code == 409
    assert "nothing to cancel" in again.json()["detail"]
    flags = LogEntry.objects.filter(object_id=str(made["id"])).values_list("action_flag", flat=True)
    assert sorted(flags) == [ADDITION, CHANGE]
    finished = plan(api).json()
    Redrive.objects.filter(pk=finished["id"]).update(status=Redrive.Status.FINISHED)
    assert api.post(f"{finished['url']}cancel/").status_code == 409
    assert Redrive.objects.get(pk=finished["id"]).status == "finished"
    assert api.post(f"{REDRIVES}99999/cancel/").status_code == 404


def client_of(*codenames: str) -> APIClient:
    user = User.objects.create_user("service", password="s3cret")
    for codename in codenames:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client = APIClient()
    client.force_login(user)
    return client


def test_reading_needs_the_view_permission_and_planning_or_cancelling_the_redrive_one(
    api,
) -> None:
    park("a", queue="webhooks")
    made = plan(api).json()
    viewer = client_of("view_queuedmessage")
    assert viewer.get(REDRIVES).status_code == 200
    assert viewer.get(made["url"]).status_code == 200
    assert plan(viewer).status_code == 403
    assert plan(viewer, dry_run=True).status_code == 403
    assert viewer.post(f"{made['url']}cancel/").status_code == 403
    assert Redrive.objects.get().status == "planned"

    nobody = APIClient()
    assert nobody.get(REDRIVES).status_code in (401, 403)
    assert plan(nobody).status_code in (401, 403)


def test_the_redrive_permission_alone_plans_and_cancels(api) -> None:
    park("a", queue="webhooks")
    operator = client_of("redrive_queuedmessage")
    made = plan(operator)
    assert made.status_code == 201
    assert made.json()["started_by"] == "service"
    assert operator.post(f"{made.json()['url']}cancel/").status_code == 200
    assert operator.get(REDRIVES).status_code == 403  # reading is the view permission's


def test_the_schema_documents_the_redrives_answers(api) -> None:
    schema = api.get(f"{API}/schema/", {"format": "json"}).json()
    validate_schema(schema)
    paths = schema["paths"]
    listing = paths[f"{REDRIVES}"]
    assert {p["name"] for p in listing["get"]["parameters"]} >= {"after", "limit", "status"}
    assert {"200", "201", "400", "403"} <= set(listing["post"]["responses"])
    assert {"200", "404"} <= set(paths[f"{REDRIVES}{{id}}/"]["get"]["responses"])
    assert {"200", "404", "409"} <= set(paths[f"{REDRIVES}{{id}}/cancel/"]["post"]["responses"])
    asked = schema["components"]["schemas"]["RedriveRequestRequest"]["properties"]
    assert {"queue", "search", "destination", "ramp", "dry_run"} <= set(asked)
