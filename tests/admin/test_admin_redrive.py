"""Redrives in the admin, used as an operator uses them: from a filtered list of
queued messages, "Redrive matching…" opens the plan with the list's queue and
search, counts what matches, plans it and lands on the redrive's page, whose
Cancel asks first. Every URL a test requests is one a page rendered."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.contrib.auth.models import Permission

from deadletter import drain
from deadletter.models import Redrive
from tests.admin.test_admin import CHANGELIST, Page, open_page
from tests.factories import park

pytestmark = pytest.mark.django_db

REDRIVES = "/admin/deadletter/redrive/"
OVERVIEW = CHANGELIST + "overview/"


@pytest.fixture(autouse=True)
def handlers(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"webhooks": "tests.factories.ok_handler"}


def queue_list(client: Any, queue: str) -> Page:
    """The queued messages' list filtered by `queue`, reached through its filter."""
    everything = open_page(client, CHANGELIST)
    return open_page(client, everything.link(queue))


def plan_page(client: Any, listing: Page) -> Page:
    return open_page(client, listing.link("Redrive matching…"))


def test_from_a_filtered_list_a_redrive_is_counted_planned_and_cancelled(admin_client) -> None:
    park("invoice paid", "invoice paid", "refund", queue="webhooks")
    park("invoice paid", queue="other")
    plan = plan_page(admin_client, queue_list(admin_client, "webhooks"))
    assert "3 messages</strong> of queue <strong>webhooks</strong> match now" in plan.text
    form = plan.form_with("search")
    counted = plan.submit(admin_client, form, search="invoice")
    assert "2 messages</strong> of queue <strong>webhooks</strong> match now" in counted.text
    assert not Redrive.objects.exists()  # counting stores nothing

    landed = counted.submit(admin_client, counted.form_with("search"), rate="5", ramp="1,5")
    redrive = Redrive.objects.get()
    assert landed.url == f"{REDRIVES}{redrive.pk}/change/"
    assert f"Redrive {redrive.pk} planned: 2 message(s)" in landed.text
    assert f"manage.py deadletter_redrive --run {redrive.pk}" in landed.text
    assert (redrive.queue, redrive.search, redrive.matched) == ("webhooks", "invoice", 2)
    assert (redrive.rate, redrive.ramp, redrive.started_by) == (5.0, [1, 5], "admin")
    assert redrive.status == Redrive.Status.PLANNED
    assert "0 of 2 (0%)" in landed.text

    confirm = open_page(admin_client, landed.link("Cancel redrive"))
    assert "Are you sure?" in confirm.text
    done = confirm.submit(admin_client, confirm.form_with("post"))
    assert done.url == f"{REDRIVES}{redrive.pk}/change/"
    assert f"Cancelled redrive(s) {redrive.pk}" in done.text
    redrive.refresh_from_db()
    assert redrive.status == Redrive.Status.CANCELLED
    assert "Cancel redrive" not in [label for label, _ in done.links]

    history = open_page(admin_client, done.link("History"))
    assert "Planned: 2 message(s) of webhooks (invoice)" in history.text
    assert "Cancelled" in history.text
    flags = LogEntry.objects.filter(object_id=str(redrive.pk)).values_list(
        "action_flag", "user__username"
    )
    assert sorted(flags) == [(ADDITION, "admin"), (CHANGE, "admin")]


def test_a_move_to_another_queue_is_planned_with_its_destination(admin_client, settings) -> None:
    settings.DEADLETTER_HANDLERS = {
        "webhooks": "tests.factories.ok_handler",
        "spare": "tests.factories.ok_handler",
    }
    park("a", "b", queue="webhooks")
    plan = plan_page(admin_client, queue_list(admin_client, "webhooks"))
    landed = plan.submit(admin_client, plan.form_with("search"), destination="spare")
    redrive = Redrive.objects.get()
    assert (redrive.destination, redrive.matched) == ("spare", 2)
    assert "queue spare" in landed.text


@pytest.mark.django_db(transaction=True)
def test_the_lists_cause_filter_becomes_the_plans_search(admin_client, settings) -> None:
    settings.DEADLETTER_HANDLERS = {"webhooks": "tests.factories.failing_handler"}
    park("f1", "f2", queue="webhooks")
    drain.Drainer(["webhooks"], drain.DrainOptions(limit=10)).run()
    park("never tried", queue="webhooks")
    settings.DEADLETTER_HANDLERS = {"webhooks": "tests.factories.ok_handler"}
    overview = open_page(admin_client, OVERVIEW)
    (cause,) = [label for label, _ in overview.links if label.startswith("2 × ConnectionError")]
    plan = plan_page(admin_client, open_page(admin_client, overview.link(cause)))
    (search,) = [i for i in plan.form_with("search")["inputs"] if i["name"] == "search"]
    assert search["value"] == 'cause:"ConnectionError: timeout after # s talking to #"'
    assert "2 messages</strong> of queue <strong>webhooks</strong> match now" in plan.text


def search_list(client: Any, listing: Page, text: str) -> Page:
    """The list's search box submitted with `text` (a GET form keeping the filters)."""
    form = listing.form_with("q")
    params = {i["name"]: i.get("value", "") for i in form["inputs"] if i.get("type") != "submit"}
    return open_page(client, form["action"], **{**params, "q": text})


def test_a_searched_list_carries_its_search_to_the_plan(admin_client) -> None:
    park("invoice paid", "invoice paid", "refund", queue="webhooks")
    park("invoice paid", queue="other")
    searched = search_list(admin_client, queue_list(admin_client, "webhooks"), "invoice")
    plan = plan_page(admin_client, searched)
    (search,) = [i for i in plan.form_with("search")["inputs"] if i["name"] == "search"]
    assert search["value"] == "invoice"
    assert "2 messages</strong> of queue <strong>webhooks</strong> match now" in plan.text
    plan.submit(admin_client, plan.form_with("search"))
    assert (Redrive.objects.get().search, Redrive.objects.get().matched) == ("invoice", 2)


@pytest.mark.django_db(transaction=True)
def test_a_list_of_every_queue_filtered_by_cause_asks_for_the_queue_first(
    admin_client, settings
) -> None:
    settings.DEADLETTER_HANDLERS = {"webhooks": "tests.factories.failing_handler"}
    park("f1", "f2", queue="webhooks")
    drain.Drainer(["webhooks"], drain.DrainOptions(limit=10)).run()
    settings.DEADLETTER_HANDLERS = {"webhooks": "tests.factories.ok_handler"}
    everything = open_page(admin_client, CHANGELIST)
    plan = plan_page(
        admin_client,
        open_page(admin_client, everything.link("ConnectionError: timeout after # s talking to #")),
    )
    assert "Please correct" not in plan.text and "match now" not in plan.text
    counted = plan.submit(admin_client, plan.form_with("search"), queue="webhooks")
    assert "2 messages</strong> of queue <strong>webhooks</strong> match now" in counted.text
    assert not Redrive.objects.exists()


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"search": 'subject:"unclosed'}, "a quote is not closed"),
        ({"search": "code:NOSUCHNAME"}, "code: wants a number or a name"),
        ({"queue": ""}, "This field is required."),
        ({"queue": "a\0b"}, "Null characters are not allowed."),
        ({"rate": "-1"}, "rate must be above 0"),
        ({"rate": "fast"}, "Enter a number."),
        ({"ramp": "1,x"}, "Whole numbers above 0"),
        ({"stop_after": "0"}, "stop-after must be a percentage above 0"),
        ({"stop_after": "101"}, "at most 100"),
        ({"concurrency": "0"}, "concurrency must be a whole number between 1 and"),
        ({"after": "yesterday"}, "Enter a valid date/time."),
        ({"destination": "webhooks"}, "the destination is the queue itself"),
        ({"destination": "nowhere"}, "no queue 'nowhere' to move into"),
    ],
)
def test_bad_values_are_form_errors_and_plan_nothing(admin_client, fields, error) -> None:
    park("m", queue="webhooks")
    plan = plan_page(admin_client, queue_list(admin_client, "webhooks"))
    shown = plan.submit(admin_client, plan.form_with("search"), **fields)
    assert shown.response.status_code == 200
    assert "Please correct the error" in shown.text
    assert error in shown.text.replace("&#x27;", "'")
    assert not Redrive.objects.exists()


def test_a_queue_without_a_handler_is_refused_with_the_engines_reason(admin_client) -> None:
    park("m", queue="unserved")
    plan = plan_page(admin_client, queue_list(admin_client, "unserved"))
    assert "DEADLETTER_HANDLERS" in plan.text
    assert "match now" not in plan.text
    assert not Redrive.objects.exists()


def test_the_list_shows_each_redrive_with_its_progress(admin_client) -> None:
    park(*[f"m{i}" for i in range(8)], queue="webhooks")
    plan = plan_page(admin_client, queue_list(admin_client, "webhooks"))
    plan.submit(admin_client, plan.form_with("search"))
    Redrive.objects.update(status=Redrive.Status.RUNNING, delivered=3, failed=1, remaining=4)
    listing = open_page(admin_client, REDRIVES)
    assert "4 of 8 (50%)" in listing.text
    assert '<progress class="dl-progress" value="4" max="8">' in listing.text
    assert "its handler" in listing.text and "every message" in listing.text
    page = open_page(admin_client, listing.link(str(Redrive.objects.get().pk)))
    assert "8 matched: 3 delivered, 1 failed again, 0 dropped, 0 moved, 4 remaining" in page.text


def test_the_cancel_action_asks_first_and_leaves_finished_redrives_alone(admin_client) -> None:
    park("a", "b", queue="webhooks")
    for _ in range(2):
        plan = plan_page(admin_client, queue_list(admin_client, "webhooks"))
        plan.submit(admin_client, plan.form_with("search"))
    running, finished = Redrive.objects.order_by("id")
    Redrive.objects.filter(pk=finished.pk).update(status=Redrive.Status.FINISHED)
    listing = open_page(admin_client, REDRIVES)
    form = listing.form_with("action")
    confirm = listing.submit(
        admin_client,
        form,
        check=[str(running.pk), str(finished.pk)],
        action="cancel_selected",
    )
    assert "Cancel these 2 redrives?" in confirm.text
    done = confirm.submit(admin_client, confirm.form_with("post"))
    assert f"Cancelled redrive(s) {running.pk}" in done.text
    assert f"Not cancelled: redrive {finished.pk}" in done.text
    statuses = dict(Redrive.objects.values_list("pk", "status"))
    assert statuses == {running.pk: "cancelled", finished.pk: "finished"}


def test_a_redrive_cannot_be_added_edited_or_deleted_through_the_generic_forms(
    admin_client,
) -> None:
    park("a", queue="webhooks")
    plan = plan_page(admin_client, queue_list(admin_client, "webhooks"))
    page = plan.submit(admin_client, plan.form_with("search"))
    redrive = Redrive.objects.get()
    assert admin_client.get(f"{REDRIVES}add/").status_code == 403
    assert admin_client.get(f"{REDRIVES}{redrive.pk}/delete/").status_code == 403
    admin_client.post(page.url, {"queue": "other", "status": "finished"})
    redrive.refresh_from_db()
    assert (redrive.queue, redrive.status) == ("webhooks", "planned")


@pytest.fixture
def viewer(client: Any, django_user_model: Any) -> Any:
    """A staff user who may see the queued messages and nothing more."""
    user = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_queuedmessage"))
    client.login(username="viewer", password="pw")
    return client


def test_without_the_permission_there_is_no_link_and_the_pages_refuse(viewer, admin_client) -> None:
    park("a", "b", queue="webhooks")
    plan = plan_page(admin_client, queue_list(admin_client, "webhooks"))
    plan.submit(admin_client, plan.form_with("search"))
    redrive = Redrive.objects.get()

    listing = queue_list(viewer, "webhooks")
    assert "Redrive matching…" not in [label for label, _ in listing.links]
    assert viewer.get(plan.url).status_code == 403
    assert viewer.post(plan.url, {"queue": "webhooks", "_redrive": "1"}).status_code == 403
    redrives = open_page(viewer, REDRIVES)
    assert "Plan a redrive…" not in [label for label, _ in redrives.links]
    page = open_page(viewer, redrives.link(str(redrive.pk)))
    assert "Cancel redrive" not in [label for label, _ in page.links]
    cancel = f"{REDRIVES}{redrive.pk}/cancel/"
    assert viewer.get(cancel).status_code == 403
    assert viewer.post(cancel, {"post": "yes"}).status_code == 403
    refused = viewer.post(
        REDRIVES, {"action": "cancel_selected", "_selected_action": [str(redrive.pk)]}
    )
    assert refused.status_code in (200, 302)
    redrive.refresh_from_db()
    assert redrive.status == Redrive.Status.PLANNED
    assert Redrive.objects.count() == 1


def test_an_unfiltered_list_has_no_redrive_link(admin_client) -> None:
    park("a", queue="webhooks")
    listing = open_page(admin_client, CHANGELIST)
    assert "Redrive matching…" not in [label for label, _ in listing.links]


def test_the_redrive_list_links_a_blank_plan(admin_client) -> None:
    park("a", queue="webhooks")
    listing = open_page(admin_client, REDRIVES)
    plan = open_page(admin_client, listing.link("Plan a redrive…"))
    landed = plan.submit(admin_client, plan.form_with("search"), queue="webhooks")
    assert "1 message</strong> of queue <strong>webhooks</strong> matches now" in landed.text
