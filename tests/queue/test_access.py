"""queue.access: patterns, the key ranges they become, and a user's scope."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser, Group, User
from django.db.models import Q

from deadletter.models import QueueAccess, QueuedMessage
from deadletter.queue import access
from deadletter.queue.access import Scope, can, scope_of
from deadletter.wire import keys
from tests.factories import park

pytestmark = pytest.mark.django_db


def queues_seen(scope: Scope, action: str = "view") -> set[str]:
    rows = QueuedMessage.objects.filter(scope.queue_q(action))
    return {keys.queue_of(bytes(k)) for k in rows.values_list("key", flat=True)}


@pytest.fixture
def queues() -> list[str]:
    names = [
        "billing",
        "billing.cards",
        "billing.refunds",
        "billingx",
        "billinf.z",
        "support",
        "support.eu",
        "mail",
        "a.billing",
    ]
    for name in names:
        park("m", queue=name)
    return names


def test_a_literal_pattern_is_one_queue(queues: list[str]) -> None:
    scope = Scope([("billing", ["view"])], unrestricted=False)
    assert queues_seen(scope) == {"billing"}
    assert scope.allows("billing")
    assert not scope.allows("billing.cards")


def test_a_trailing_star_is_one_range_of_the_prefix(queues: list[str]) -> None:
    scope = Scope([("billing.*", ["view"])], unrestricted=False)
    assert queues_seen(scope) == {"billing.cards", "billing.refunds"}
    assert scope.intervals() == [(b"billing.", b"billing/")]
    star = Scope([("billing*", ["view"])], unrestricted=False)
    assert queues_seen(star) == {"billing", "billing.cards", "billing.refunds", "billingx"}


def test_a_lone_star_is_every_queue(queues: list[str]) -> None:
    scope = Scope([("*", ["view"])], unrestricted=False)
    assert queues_seen(scope) == set(queues)


def test_other_patterns_are_resolved_to_the_names_that_exist(queues: list[str]) -> None:
    scope = Scope([("*.billing", ["view"]), ("support.??", ["view"])], unrestricted=False)
    assert queues_seen(scope) == {"a.billing", "support.eu"}
    assert scope.allows("z.billing")  # a name that does not exist yet still matches


def test_a_pattern_with_a_prefix_walks_only_names_with_that_prefix(queues: list[str]) -> None:
    scope = Scope([("billing.[cr]*", ["view"])], unrestricted=False)
    assert queues_seen(scope) == {"billing.cards", "billing.refunds"}


def test_an_action_needs_view_on_the_queue_too(queues: list[str]) -> None:
    scope = Scope(
        [("billing*", ["view"]), ("billing.cards", ["retry"]), ("support", ["delete"])],
        unrestricted=False,
    )
    assert scope.allows("billing.cards", "retry")
    assert not scope.allows("billing.refunds", "retry")
    assert not scope.allows("support", "delete")
    assert not scope.allows("support")
    assert queues_seen(scope, "retry") == {"billing.cards"}
    assert queues_seen(scope, "delete") == set()
    assert scope.names_filter(queues, "retry") == ["billing.cards"]


def test_require_hides_an_unseen_queue_and_forbids_an_action_not_granted() -> None:
    scope = Scope([("billing*", ["view"]), ("billing.cards", ["retry"])], unrestricted=False)
    access.require(scope, "billing.cards", "retry")
    access.require(scope, "billing.refunds")
    with pytest.raises(access.Forbidden) as forbidden:
        access.require(scope, "billing.refunds", "retry")
    assert (
        str(forbidden.value) == "Your queue access does not grant retry on queue 'billing.refunds'."
    )
    assert (forbidden.value.queue, forbidden.value.action) == ("billing.refunds", "retry")
    with pytest.raises(access.Hidden):
        access.require(scope, "support", "retry")
    with pytest.raises(access.Hidden):
        access.require(scope, "support")
    access.require(Scope.everything(), "support", "delete")


def test_nothing_granted_is_a_q_that_matches_nothing(queues: list[str]) -> None:
    scope = Scope([], unrestricted=False)
    assert queues_seen(scope) == set()
    assert not scope.allows("billing")


def test_unrestricted_is_q_and_allows_all() -> None:
    scope = Scope.everything()
    assert scope.queue_q("delete") == Q()
    assert scope.allows("anything", "redrive")


def test_an_unknown_action_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown action 'purge'"):
        Scope.everything().allows("q", "purge")


@pytest.fixture
def billing_user() -> User:
    user = User.objects.create_user("bill", password="pw")
    team = Group.objects.create(name="billing")
    user.groups.add(team)
    QueueAccess.objects.create(group=team, queues="billing.*", view=True, retry=True)
    QueueAccess.objects.create(user=user, queues="mail", view=True, delete=True)
    QueueAccess.objects.create(user=User.objects.create_user("other"), queues="support*")
    return User.objects.get(pk=user.pk)


def test_scope_of_a_user_adds_their_group_and_own_rows(billing_user: User) -> None:
    scope = scope_of(billing_user)
    assert not scope.unrestricted
    assert scope.allows("billing.cards", "retry")
    assert not scope.allows("billing.cards", "delete")
    assert scope.allows("mail", "delete")
    assert not scope.allows("mail", "retry")
    assert not scope.allows("support")
    assert can(billing_user, "retry", "billing.refunds")


def test_scope_of_is_read_once_per_user_object(
    billing_user: User, django_assert_num_queries
) -> None:
    with django_assert_num_queries(1):
        scope_of(billing_user)
        scope_of(billing_user)
    fresh = User.objects.get(pk=billing_user.pk)
    QueueAccess.objects.create(user=fresh, queues="support", view=True)
    assert scope_of(fresh).allows("support")
    assert not scope_of(billing_user).allows("support")
    access.forget(billing_user)
    assert scope_of(billing_user).allows("support")


def test_a_user_with_no_row_sees_nothing_once_any_row_exists(billing_user: User) -> None:
    nobody = User.objects.create_user("nobody")
    assert not scope_of(nobody).unrestricted
    assert not scope_of(nobody).allows("billing.cards")
    assert not scope_of(AnonymousUser()).allows("billing.cards")


def test_without_any_row_everyone_is_unrestricted(django_assert_num_queries) -> None:
    user = User.objects.create_user("u")
    with django_assert_num_queries(1):
        assert scope_of(user).unrestricted
    assert scope_of(AnonymousUser()).unrestricted


def test_a_superuser_is_unrestricted_without_a_statement(
    billing_user: User, django_assert_num_queries
) -> None:
    root = User.objects.create_superuser("root")
    with django_assert_num_queries(0):
        assert scope_of(root).unrestricted


def test_granted_names_walks_only_the_granted_ranges(queues: list[str]) -> None:
    scope = Scope(
        [("billing.*", ["view"]), ("mail", ["view"]), ("s*.eu", ["view"])], unrestricted=False
    )
    assert scope.granted_names(10) == ["billing.cards", "billing.refunds", "mail", "support.eu"]
    assert scope.granted_names(2) == ["billing.cards", "billing.refunds"]
    assert scope.granted_names(10, after="billing.cards") == [
        "billing.refunds",
        "mail",
        "support.eu",
    ]
    assert scope.granted_names(2, before="support.eu") == ["mail", "billing.refunds"]
    assert scope.granted_names(10, before="billing.cards") == []


def test_granted_names_of_an_unrestricted_scope_is_every_queue(queues: list[str]) -> None:
    assert Scope.everything().granted_names(100) == sorted(queues)
    assert Scope.everything().granted_names(2, before="billinf.z") == ["a.billing"]
