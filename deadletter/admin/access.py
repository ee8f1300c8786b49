"""Per-queue access in the admin: the `QueueAccess` rules, and what the other pages
call to keep a user to the queues the rules grant them (`queue.access`).

Another team's message is a 404 (never a 403, which would say it exists); an
action the user's rules do not grant on a queue they see is a 403. A bulk action
drops the selected rows outside the user's grant and says how many.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import unquote
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, QueryDict

from deadletter.models import QueueAccess
from deadletter.models.access import ACTIONS
from deadletter.queue import access
from deadletter.wire import keys

NOT_FOUND = "No such message."


def scope(request: HttpRequest) -> access.Scope:
    """The request's user's scope, read once per request (`access.scope_of`)."""
    return access.scope_of(request.user)


def key_queue(object_id: str) -> str | None:
    """The queue of the key a URL names in hex; None for text that is not a key."""
    try:
        return keys.queue_of(keys.from_text(unquote(object_id)))
    except ValueError:
        return None


def require(request: HttpRequest, object_id: str, action: str = "view") -> None:
    """Http404 when the key's queue is not one the user may view, PermissionDenied
    when they may view it but not do `action` there (`queue.access.require`). Judged
    on the key's queue, not on whether the row exists: a key of another team's queue
    tells nothing. Text that is not a key is left to the page, which finds no row."""
    queue = key_queue(object_id)
    if queue is None:
        return
    with answered():
        access.require(scope(request), queue, action)


@contextlib.contextmanager
def answered() -> Iterator[None]:
    """The admin's answer to a refusal of `queue.access` raised within: `Hidden` as a
    missing message (Http404), `Forbidden` as PermissionDenied (403)."""
    try:
        yield
    except access.Hidden:
        raise Http404(NOT_FOUND) from None
    except access.Forbidden:
        raise PermissionDenied from None


def within(
    model_admin: admin.ModelAdmin,
    request: HttpRequest,
    queryset: QuerySet[Any],
    action: str,
    *,
    chosen: int | None,
) -> QuerySet[Any]:
    """`queryset` (a bulk action's selection) kept to the queues where the user may do
    `action`; the user is told how many selected rows were left alone. `chosen`:
    how many keys were posted (None for "all matching", which only the rows of
    queues the user sees can match)."""
    found = scope(request)
    if found.unrestricted:
        return queryset
    kept = queryset.filter(found.queue_q(action))
    if chosen is not None:
        dropped = chosen - kept.count()
    elif action == "view":
        dropped = 0
    else:
        dropped = queryset.exclude(found.queue_q(action)).order_by()[:100_001].count()
    if dropped > 0:
        model_admin.message_user(
            request,
            f"{dropped:,} selected message(s) are not in queues where you may {action} "
            "(or are gone): left alone.",
            messages.WARNING,
        )
    return kept


def posted(request: HttpRequest) -> int | None:
    """How many rows an action was posted for (None for "all matching")."""
    if request.POST.get("select_across") == "1":
        return None
    return len(set(request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)))


def affected(group: Any, user: Any) -> str:
    """What saving a rule for `group` or `user` does, in users: the active users who
    are not superusers that it applies to and, when it is the first rule, the others
    it leaves with no queue until a rule grants them one."""
    people = get_user_model().objects.filter(is_active=True, is_superuser=False)
    if group is not None:
        held = people.filter(groups=group).count()
        whom = f"group {group}"
    else:
        held = int(people.filter(pk=user.pk).exists())
        whom = f"user {user}"
    text = f"This rule applies to {held:,} user(s) ({whom}; superusers are never restricted)."
    if not QueueAccess.objects.exists():
        others = people.count() - held
        text += (
            f" It is the first rule: from then on the other {others:,} active user(s) who "
            "are not superusers see no queue until a rule grants them one."
        )
    return text


class QueueAccessForm(forms.ModelForm):
    """Exactly one holder, a group or a user, and a pattern that is not empty; a new
    or changed rule is saved only once `confirm` is ticked after the form said how
    many users it affects (`affected`)."""

    confirm = forms.BooleanField(
        required=False,
        label="Confirm",
        help_text="Tick to save once the form has said how many users the rule affects.",
    )

    class Meta:
        model = QueueAccess
        fields = ("group", "user", "queues", *ACTIONS)

    def clean_queues(self) -> str:
        pattern: str = self.cleaned_data.get("queues") or ""
        if not pattern.strip():
            raise forms.ValidationError("A pattern is needed, such as billing.* or mail.")
        if "\x00" in pattern:
            raise forms.ValidationError("A queue name holds no NUL.")
        return pattern

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if bool(data.get("group")) == bool(data.get("user")):
            raise forms.ValidationError("Choose a group or a user: exactly one of them.")
        changed = set(self.changed_data) - {"confirm"}
        if changed and not self.errors and not data.get("confirm"):
            ticked = QueryDict(mutable=True)
            ticked.update(self.data)
            ticked["confirm"] = "on"  # shown ticked: saving again confirms
            self.data = ticked
            raise forms.ValidationError(
                affected(data.get("group"), data.get("user"))
                + " Save again to confirm (Confirm is now ticked)."
            )
        return data


@admin.register(QueueAccess)
class QueueAccessAdmin(admin.ModelAdmin):
    """The rules: which group or user may do what on the queues a pattern matches."""

    form = QueueAccessForm
    list_display = ["holder", "queues", *ACTIONS]
    list_display_links = ["holder", "queues"]
    list_filter = list(ACTIONS)
    search_fields = ["queues", "group__name", "user__username"]
    fieldsets = (
        (None, {"fields": ("group", "user", "queues")}),
        (
            "Grants on those queues",
            {
                "fields": ACTIONS,
                "description": "An action needs view on the queue too, and the matching "
                "model permission. Once any rule exists, users who are not superusers "
                "see only the queues their rules (their own and their groups') grant.",
            },
        ),
        (None, {"fields": ("confirm",)}),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[QueueAccess]:
        """Every rule for a user who may change them; a restricted user's own rules
        and their groups' only (the others name other teams' queues)."""
        rules = super().get_queryset(request).select_related("group", "user")
        if access.may_change_rules(request.user):
            return rules
        user = request.user
        return rules.filter(Q(user_id=user.pk) | Q(group_id__in=user.groups.values("id")))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return super().has_add_permission(request) and access.may_change_rules(request.user)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        allowed = super().has_change_permission(request, obj)
        return allowed and access.may_change_rules(request.user)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        allowed = super().has_delete_permission(request, obj)
        return allowed and access.may_change_rules(request.user)

    @admin.display(description="group or user", ordering="group__name")
    def holder(self, obj: QueueAccess) -> str:
        return f"group {obj.group}" if obj.group_id else f"user {obj.user}"

    def delete_model(self, request: HttpRequest, obj: QueueAccess) -> None:
        """By query: the model's `delete` is its boolean field, which hides `Model.delete`."""
        QueueAccess.objects.filter(pk=obj.pk).delete()
