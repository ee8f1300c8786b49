"""Who may change the `QueueAccess` rules (issue 44): only an unrestricted user (an
active superuser, or anyone while no rule exists). A staff user whose group holds
every permission of the app, the rules' included, but whom a rule restricts, can
neither add, change nor delete a rule, so he can never widen his own scope nor
anyone's; and a rule is saved only after the form said how many users it affects."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from deadletter.models import QueueAccess
from deadletter.queue import access, store_failed_msgs
from deadletter.wire.messages import Message
from tests.admin.test_admin import CHANGELIST, open_page

pytestmark = pytest.mark.django_db

RULES = "/admin/deadletter/queueaccess/"


def every_permission(user: User) -> None:
    """The set docs/api.md's token recipe grants: every permission of the app."""
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="deadletter"))


@pytest.fixture
def bob() -> tuple[Client, User, QueueAccess]:
    """A staff user kept to `billing.*` by his group's rule, holding every permission
    of the app; another team's rule beside it."""
    user = User.objects.create_user("bob", password="pw", is_staff=True)
    every_permission(user)
    team = Group.objects.create(name="billing")
    user.groups.add(team)
    mine = QueueAccess.objects.create(group=team, queues="billing.*", retry=True)
    QueueAccess.objects.create(group=Group.objects.create(name="support"), queues="support*")
    client = Client()
    client.force_login(user)
    return client, user, mine


def everything(holder: dict[str, Any]) -> dict[str, Any]:
    grants = dict.fromkeys(("view", "retry", "edit", "delete", "redrive"), "on")
    return {**holder, "queues": "*", **grants, "confirm": "on"}


def test_a_restricted_user_is_offered_no_add_and_adding_is_refused(bob: Any) -> None:
    client, user, _ = bob
    store_failed_msgs("support", Message(subject="theirs"))
    listing = open_page(client, RULES)
    assert f"{RULES}add/" not in listing.text
    assert client.get(f"{RULES}add/").status_code == 403
    refused = client.post(f"{RULES}add/", everything({"user": user.pk}))
    assert refused.status_code == 403
    assert not QueueAccess.objects.filter(queues="*").exists()
    assert "theirs" not in open_page(client, CHANGELIST).text


def test_a_restricted_user_can_neither_change_nor_delete_a_rule(bob: Any) -> None:
    client, user, mine = bob
    changed = client.post(f"{RULES}{mine.pk}/change/", everything({"group": mine.group_id}))
    assert changed.status_code == 403
    assert client.post(f"{RULES}{mine.pk}/delete/", {"post": "yes"}).status_code == 403
    theirs = QueueAccess.objects.get(queues="support*")
    assert client.post(f"{RULES}{theirs.pk}/delete/", {"post": "yes"}).status_code in (403, 404)
    bulk = {"action": "delete_selected", "_selected_action": [mine.pk, theirs.pk], "post": "yes"}
    client.post(RULES, bulk)
    assert QueueAccess.objects.filter(pk__in=[mine.pk, theirs.pk]).count() == 2
    mine.refresh_from_db()
    assert (mine.queues, mine.delete, mine.edit) == ("billing.*", False, False)
    assert not access.scope_of(User.objects.get(pk=user.pk)).allows("support", "view")


def test_a_restricted_user_sees_only_the_rules_that_hold_him(bob: Any) -> None:
    client, _, mine = bob
    listing = open_page(client, RULES)
    assert "billing.*" in listing.text
    assert "support*" not in listing.text
    assert client.get(f"{RULES}{mine.pk}/change/").status_code == 200


def test_a_superuser_is_told_how_many_users_a_rule_affects_before_it_is_saved(
    admin_client: Client,
) -> None:
    team = Group.objects.create(name="billing")
    for name in ("ann", "ben", "cid"):
        User.objects.create_user(name).groups.add(team)
    User.objects.create_user("gone", is_active=False).groups.add(team)
    User.objects.create_user("dan")
    data = {"group": team.pk, "queues": "billing.*", "view": "on"}
    first = admin_client.post(f"{RULES}add/", data)
    text = first.content.decode()
    assert first.status_code == 200
    assert "This rule applies to 3 user(s) (group billing" in text
    assert "It is the first rule: from then on the other 1 active user(s)" in text
    assert not QueueAccess.objects.exists()
    done = admin_client.post(f"{RULES}add/", {**data, "confirm": "on"})
    assert done.status_code == 302
    assert QueueAccess.objects.get().queues == "billing.*"


def test_anyone_with_the_permission_may_write_the_first_rule_only(db: Any) -> None:
    user = User.objects.create_user("lead", is_staff=True)
    every_permission(user)
    client = Client()
    client.force_login(user)
    assert f"{RULES}add/" in open_page(client, RULES).text
    rule = {"user": user.pk, "queues": "billing.*", "view": "on", "confirm": "on"}
    assert client.post(f"{RULES}add/", rule).status_code == 302
    assert client.post(f"{RULES}add/", {**rule, "queues": "*"}).status_code == 403
    assert list(QueueAccess.objects.values_list("queues", flat=True)) == ["billing.*"]
