"""Causes in the admin: each failure signature of each queue as an incident
(`queue.incidents`), listed by last seen, filtered by queue and status, with
Acknowledge, Resolve and Mute for… (each a `LogEntry` on the cause), a link to the
queued messages of the cause and one to plan a redrive of them.

A user kept to some queues (`queue.access`) sees the causes of the queues they
may view only. Viewing needs Django's `view_cause`, acting and editing `change_cause`; causes are
made by failures only, never added or deleted here. The change page edits the
owner and the note and nothing else: the figures are the writers' (`note_failure`
adds to them meanwhile, so a save writes those two columns only).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import urlencode

from deadletter.admin import redrives
from deadletter.models import Cause
from deadletter.queue import access, incidents, mutes, search
from deadletter.queue.refusals import Refused

TEMPLATES = "admin/deadletter/cause"
# Queues the queue filter lists (a DISTINCT over the causes' (queue, ...) index:
# the table holds a row per queue and signature, not per message).
MAX_QUEUES_LISTED = 100
SIGNATURE_SHOWN = 80
REDRIVE = "redrive_link"


def granted(request: HttpRequest, causes: QuerySet[Cause]) -> QuerySet[Cause]:
    """The causes of the queues the user may view (`queue.access`): the table holds
    one row per queue and signature, so its distinct queues are read and judged."""
    scope = access.scope_of(request.user)
    if scope.unrestricted:
        return causes
    names = causes.order_by("queue").values_list("queue", flat=True).distinct()
    return causes.filter(queue__in=scope.names_filter(names))


class QueueFilter(admin.SimpleListFilter):
    """Filter by queue. Its choices are the distinct queues of the causes (the first
    `MAX_QUEUES_LISTED` by name): read off the (queue, last_seen, id) index of a
    table of one row per queue and signature, never the queue table."""

    title = "queue"
    parameter_name = "queue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = list(
            granted(request, incidents.causes())
            .order_by("queue")
            .values_list("queue", flat=True)
            .distinct()[:MAX_QUEUES_LISTED]
        )
        chosen = self.value()
        if chosen and chosen not in names:
            names.append(chosen)
        return [(name, name) for name in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Cause]) -> QuerySet[Cause]:
        name = self.value()
        return queryset.filter(queue=name) if name else queryset


class StatusFilter(admin.SimpleListFilter):
    """Filter by status as it reads now: a mute whose time is past is open."""

    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(value, str(label)) for value, label in Cause.Status.choices]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Cause]) -> QuerySet[Cause]:
        status = self.value()
        if status not in Cause.Status.values:
            return queryset
        return queryset.filter(incidents.status_q(status))


class AcknowledgeForm(forms.Form):
    note = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text="Optional: what is known, what is being done. Empty keeps each note.",
    )


class MuteForm(forms.Form):
    duration = forms.ChoiceField(
        choices=[
            ("hour", "1 hour"),
            ("day", "1 day"),
            ("week", "1 week"),
            (mutes.UNTIL, "until the date below"),
        ],
        initial="hour",
        widget=forms.RadioSelect,
    )
    until = forms.DateTimeField(
        required=False, help_text="For “until the date below”: YYYY-MM-DD HH:MM (this site's zone)."
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if "duration" in data:
            try:
                data["ends"] = mutes.mute_end(data["duration"], data.get("until"))
            except Refused as exc:
                self.add_error(exc.field, exc.message)
        return data


def messages_url(cause: Cause) -> str:
    """The queued messages' list filtered by the cause: its queue and signature."""
    url = reverse("admin:deadletter_queuedmessage_changelist")
    return f"{url}?{urlencode({'queue': cause.queue, 'cause': cause.signature})}"


def redrive_url(cause: Cause) -> str:
    """The redrive planning page for the cause's messages (queue and `cause:"…"`)."""
    url = reverse("admin:deadletter_redrive_plan")
    query = {"queue": cause.queue, "search": f"cause:{search.quote(cause.signature)}"}
    return f"{url}?{urlencode(query)}"


@admin.register(Cause)
class CauseAdmin(admin.ModelAdmin):
    list_display = [
        "queue",
        "signature_cut",
        "status_now",
        "count",
        "first_seen",
        "last_seen",
        "owner",
        "messages_link",
        REDRIVE,
    ]
    list_display_links = ["signature_cut"]
    list_filter = [QueueFilter, StatusFilter]
    ordering = ["-last_seen", "-id"]
    list_per_page = 50
    show_facets = admin.ShowFacets.NEVER
    fields = (
        "queue",
        "signature",
        "status_now",
        "count",
        "first_seen",
        "last_seen",
        "opened_at",
        "reopened",
        "resolved_at",
        "messages_link",
        REDRIVE,
        "owner",
        "note",
    )
    readonly_fields = tuple(f for f in fields if f not in ("owner", "note"))
    actions = ["acknowledge_selected", "resolve_selected", "mute_selected"]

    class Media:
        css = {"all": ["deadletter/admin.css"]}

    # -- permissions and rows

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Cause]:
        return granted(request, incidents.causes()).order_by(*self.ordering)

    def save_model(self, request: HttpRequest, obj: Cause, form: Any, change: bool) -> None:
        """Owner and note only: the counts move under the writers meanwhile."""
        obj.save(update_fields=["owner", "note"])

    # -- actions

    @admin.action(description="Acknowledge selected causes (you as owner)", permissions=["change"])
    def acknowledge_selected(
        self, request: HttpRequest, queryset: QuerySet[Cause]
    ) -> TemplateResponse | None:
        form = AcknowledgeForm(request.POST if "apply" in request.POST else None)
        if not form.is_valid():
            return self._form_page(request, queryset, form, "acknowledge_selected", "Acknowledge")
        owner = request.user.get_username()
        note = form.cleaned_data["note"] or None
        chosen = list(queryset)
        incidents.acknowledge([c.id for c in chosen], owner=owner, note=note)
        said = f" ({note})" if note else ""
        for cause in chosen:
            self.log_change(request, cause, f"Acknowledged, owner {owner}{said}")
        self.message_user(
            request, f"Acknowledged {len(chosen)} cause(s), owner {owner}.", messages.SUCCESS
        )
        return None

    @admin.action(description="Resolve selected causes", permissions=["change"])
    def resolve_selected(self, request: HttpRequest, queryset: QuerySet[Cause]) -> None:
        chosen = list(queryset)
        incidents.resolve([c.id for c in chosen], actor=request.user.get_username())
        for cause in chosen:
            self.log_change(request, cause, "Resolved")
        self.message_user(
            request,
            f"Resolved {len(chosen)} cause(s); a cause that fails again opens again.",
            messages.SUCCESS,
        )

    @admin.action(description="Mute selected causes for…", permissions=["change"])
    def mute_selected(
        self, request: HttpRequest, queryset: QuerySet[Cause]
    ) -> TemplateResponse | None:
        form = MuteForm(request.POST if "apply" in request.POST else None)
        if not form.is_valid():
            return self._form_page(request, queryset, form, "mute_selected", "Mute")
        until = form.cleaned_data["ends"]
        chosen = list(queryset)
        incidents.mute([c.id for c in chosen], until=until, actor=request.user.get_username())
        shown = timezone.localtime(until).strftime("%Y-%m-%d %H:%M %Z")
        for cause in chosen:
            self.log_change(request, cause, f"Muted until {shown}")
        self.message_user(request, f"Muted {len(chosen)} cause(s) until {shown}.", messages.SUCCESS)
        return None

    def _form_page(
        self,
        request: HttpRequest,
        queryset: QuerySet[Cause],
        form: forms.Form,
        action: str,
        verb: str,
    ) -> TemplateResponse:
        """The intermediate page of an action: the chosen causes and the form, posted
        back to the list with the action and the selection."""
        context = {
            **self.admin_site.each_context(request),
            "title": f"{verb} causes",
            "opts": self.opts,
            "causes": list(queryset),
            "form": form,
            "action": action,
            "verb": verb,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "select_across": request.POST.get("select_across", "0"),
        }
        return TemplateResponse(request, f"{TEMPLATES}/action_form.html", context)

    # -- columns

    @admin.display(description="signature", ordering="signature")
    def signature_cut(self, obj: Cause) -> Any:
        text = obj.signature
        if len(text) <= SIGNATURE_SHOWN:
            return text
        return format_html('<span title="{}">{}…</span>', text, text[: SIGNATURE_SHOWN - 1])

    @admin.display(description="status", ordering="status")
    def status_now(self, obj: Cause) -> str:
        status = incidents.effective_status(obj)
        if status == Cause.Status.MUTED and obj.muted_until is not None:
            until = timezone.localtime(obj.muted_until).strftime("%Y-%m-%d %H:%M")
            return f"muted until {until}"
        if status == Cause.Status.OPEN and obj.reopened:
            return "open (reopened)"
        return status

    @admin.display(description="messages")
    def messages_link(self, obj: Cause) -> Any:
        return format_html('<a href="{}" class="dl-cause-messages">messages</a>', messages_url(obj))

    @admin.display(description="redrive")
    def redrive_link(self, obj: Cause) -> Any:
        return format_html(
            '<a href="{}" class="dl-cause-redrive">Redrive this cause</a>', redrive_url(obj)
        )

    # "Redrive this cause" for those who may redrive only (`admin.redrives`).
    def get_list_display(self, request: HttpRequest) -> Any:
        shown = list(super().get_list_display(request))
        return shown if redrives.may_redrive(request) else [f for f in shown if f != REDRIVE]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        shown = list(super().get_fields(request, obj))
        return shown if redrives.may_redrive(request) else [f for f in shown if f != REDRIVE]
