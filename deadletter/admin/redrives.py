"""The admin's redrives: the stored jobs listed with their progress, each read-only
with a Cancel, and the "Redrive matching…" page that plans one from a filtered
or searched list of queued messages.

The admin only plans and cancels (`drain.redrives`); the drain service
(`deadletter_drain --forever`) or `deadletter_redrive --run ID` runs a planned
redrive, and the counts it writes as it goes are what the pages show. Planning
and cancelling need `deadletter.redrive_queuedmessage` (403 otherwise, and no
link or button); each is a `LogEntry` in the redrive's History naming the user.
A user kept to some queues (`queue.access`) lists the redrives of the queues they
may view, and plans (from and into) and cancels where they may redrive.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.http import urlencode

from deadletter.drain import redrives
from deadletter.models import Redrive
from deadletter.queue import access, redaction, search
from deadletter.queue.search import qualifiers

# The list's filters a plan takes over (`deadletter.admin.changelist`), and its search box.
LIST_QUEUE, LIST_CAUSE, LIST_SEARCH = "queue", "cause", "q"
FILTER_FIELDS = ("queue", "search", "after", "before")


def may_redrive(request: HttpRequest) -> bool:
    return bool(request.user.has_perm(redrives.PERMISSION))


def plan_link(request: HttpRequest) -> str | None:
    """The "Redrive matching…" link of the queued messages' list: the plan page with
    the list's queue and search (its cause filter as `cause:"…"`), or None when the
    list is neither filtered by queue nor searched, or the user may not redrive."""
    queue = request.GET.get(LIST_QUEUE, "")
    text = request.GET.get(LIST_SEARCH, "").strip()
    cause = request.GET.get(LIST_CAUSE, "")
    if not may_redrive(request) or not (queue or text or cause):
        return None
    if queue and not access.scope_of(request.user).allows(queue, redrives.ACTION):
        return None
    if cause:
        text = f"{text} cause:{search.quote(cause)}".strip()
    params = {name: value for name, value in (("queue", queue), ("search", text)) if value}
    return f"{reverse('admin:deadletter_redrive_plan')}?{urlencode(params)}"


class RedriveForm(forms.Form):
    """What a redrive is asked to do, converted from the page's text; its rules are
    `plan_redrive`'s, whose `RedriveError` comes back as an error on its field."""

    queue = forms.CharField(strip=False, help_text="The queue whose messages are redriven.")
    search = forms.CharField(required=False, help_text=qualifiers.help_text())
    after = forms.DateTimeField(required=False, help_text="First failure at or after (ISO).")
    before = forms.DateTimeField(required=False, help_text="First failure before (ISO).")
    destination = forms.CharField(
        required=False,
        strip=False,
        help_text="Move the messages into this queue (no handler call, order kept); "
        "empty: hand each to its queue's handler.",
    )
    rate = forms.FloatField(required=False, help_text="At most this many messages a second.")
    ramp = forms.CharField(
        required=False,
        help_text="Step sizes to ramp up through, such as 1,5,20 (then the rest at the rate).",
    )
    stop_after = forms.FloatField(
        required=False,
        label="Stop after %",
        help_text="Stop when more than this percentage of a step's messages fail again.",
    )
    ignore_backoff = forms.BooleanField(
        required=False, help_text="Hand over the messages a backoff holds back too."
    )
    concurrency = forms.IntegerField(initial=1, help_text="Messages handed to the handler at once.")

    def clean_ramp(self) -> tuple[int, ...]:
        text: str = self.cleaned_data["ramp"]
        parts = [part.strip() for part in text.split(",")] if text.strip() else []
        if not all(part.isdigit() for part in parts):
            raise forms.ValidationError("Whole numbers above 0, separated by commas (1,5,20).")
        return tuple(int(part) for part in parts)

    def plan(self, user: Any, *, save: bool, reveal: bool = True) -> Redrive | None:
        """The redrive these values ask for, stored as planned by `user` when `save`;
        None, and the `RedriveError` on its field, for what `plan_redrive` refuses.
        Without `reveal` its search never matches what `DEADLETTER_REDACT` masks."""
        try:
            return redrives.plan_redrive(
                **redrives.inputs(self.cleaned_data),
                started_by=user.get_username(),
                save=save,
                reveal=reveal,
                by=user,
            )
        except redrives.RedriveError as exc:
            self.add_error(exc.field if exc.field in self.fields else None, exc.message)
            return None


@admin.register(Redrive)
class RedriveAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "status",
        "queue",
        "filter",
        "target",
        "progress",
        "started_by",
        "created_at",
        "started_at",
        "finished_at",
    ]
    list_display_links = ["id"]
    list_filter = ["status"]
    list_per_page = 50
    fields = (
        "status",
        "reason",
        "queue",
        "filter",
        "target",
        "progress",
        "counts",
        "pace",
        "started_by",
        "created_at",
        "started_at",
        "finished_at",
        "runner",
        "heartbeat_at",
    )
    readonly_fields = fields
    actions = ["cancel_selected"]

    class Media:
        css = {"all": ["deadletter/admin.css"]}

    # -- permissions

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Whoever may see the queued messages may see what is done with them."""
        if request.user.has_perm("deadletter.view_queuedmessage"):
            return True
        return super().has_view_permission(request, obj)

    def has_redrive_permission(self, request: HttpRequest) -> bool:
        return may_redrive(request)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Redrive]:
        """The redrives of the queues the user may view (`queue.access`)."""
        return redrives.visible(access.scope_of(request.user))

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [
            path("plan/", wrap(self.plan_view), name="deadletter_redrive_plan"),
            path(
                "<path:object_id>/cancel/", wrap(self.cancel_view), name="deadletter_redrive_cancel"
            ),
            *super().get_urls(),
        ]

    # -- pages

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        context = {"may_redrive": may_redrive(request), **(extra_context or {})}
        return super().changelist_view(request, context)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> Any:
        obj = self.get_object(request, unquote(object_id))
        cancellable = (
            obj is not None
            and obj.status in redrives.CANCELLABLE
            and may_redrive(request)
            and access.scope_of(request.user).allows(obj.queue, redrives.ACTION)
        )
        context = {"cancellable": cancellable, **(extra_context or {})}
        return super().change_view(request, object_id, form_url, context)

    def plan_view(self, request: HttpRequest) -> HttpResponse:
        """GET (the list's link) and "Count": the form and how many messages match
        now; "Redrive": plan it and go to its page."""
        if not may_redrive(request):
            raise PermissionDenied
        data = request.POST if request.method == "POST" else request.GET
        given = {"concurrency": "1", **data.dict()}
        # A list searched across queues gives no queue: asked for, not an error yet.
        counts_now = request.method == "POST" or bool(data.get("queue"))
        form = RedriveForm(given) if counts_now else RedriveForm(initial=given)
        planned: Redrive | None = None
        pressed = request.method == "POST" and "_redrive" in request.POST
        # "Redrive" plans only the filter whose count the page showed.
        recounted = pressed and request.POST.get("counted") != counted_mark(data)
        if form.is_valid():
            refuse_foreign(request, form)
        if form.is_valid():
            confirmed = pressed and not recounted
            planned = form.plan(
                request.user, save=confirmed, reveal=redaction.reveals(request.user)
            )
            if planned is not None and confirmed:
                return self._planned(request, planned)
        context = {
            **self.admin_site.each_context(request),
            "title": "Redrive matching messages",
            "opts": self.opts,
            "adminform": _fieldsets(form),
            "form": form,
            "plan": planned,
            "counted": counted_mark(data),
            "recounted": recounted and planned is not None,
            "back_url": _back_url(form),
        }
        return TemplateResponse(request, "admin/deadletter/redrive/plan.html", context)

    def _planned(self, request: HttpRequest, redrive: Redrive) -> HttpResponse:
        self.message_user(
            request,
            f"Redrive {redrive.pk} planned: {redrive.matched} message(s); the drain service "
            f"runs it (or manage.py deadletter_redrive --run {redrive.pk}).",
            messages.SUCCESS,
        )
        return HttpResponseRedirect(reverse("admin:deadletter_redrive_change", args=[redrive.pk]))

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """GET: "Are you sure?"; POST: the redrive cancelled (what it did stays done)."""
        if not may_redrive(request):
            raise PermissionDenied
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404(f"No redrive {object_id}.")
        if not access.scope_of(request.user).allows(obj.queue, redrives.ACTION):
            raise PermissionDenied
        change_url = reverse("admin:deadletter_redrive_change", args=[obj.pk])
        if request.method == "POST":
            self._cancel(request, [obj])
            return HttpResponseRedirect(change_url)
        return self._confirmation(request, [obj], form_url=request.get_full_path(), back=change_url)

    # -- the list's action

    @admin.action(description="Cancel selected redrives", permissions=["redrive"])
    def cancel_selected(
        self, request: HttpRequest, queryset: QuerySet[Redrive]
    ) -> TemplateResponse | None:
        scope = access.scope_of(request.user)
        chosen = [redrive for redrive in queryset if scope.allows(redrive.queue, redrives.ACTION)]
        if len(chosen) < len(queryset):
            self.message_user(
                request,
                f"{len(queryset) - len(chosen)} selected redrive(s) are of queues where you "
                "may not redrive: left alone.",
                messages.WARNING,
            )
        if not chosen:
            return None
        if request.POST.get("post") == "yes":
            self._cancel(request, chosen)
            return None
        return self._confirmation(
            request,
            chosen,
            form_url=request.get_full_path(),
            back=request.get_full_path(),
            action="cancel_selected",
        )

    def _confirmation(
        self,
        request: HttpRequest,
        chosen: list[Redrive],
        *,
        form_url: str,
        back: str,
        action: str = "",
    ) -> TemplateResponse:
        context = {
            **self.admin_site.each_context(request),
            "title": "Are you sure?",
            "opts": self.opts,
            "redrives": chosen,
            "single": chosen[0] if not action else None,
            "action": action,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "form_url": form_url,
            "back_url": back,
        }
        return TemplateResponse(
            request, "admin/deadletter/redrive/cancel_confirmation.html", context
        )

    def _cancel(self, request: HttpRequest, chosen: list[Redrive]) -> None:
        cancelled, refused = [], []
        for redrive in chosen:
            try:
                redrives.cancel_redrive(redrive.pk, by=request.user)
            except redrives.RedriveError as exc:
                refused.append(f"redrive {redrive.pk}: {exc}")
                continue
            cancelled.append(str(redrive.pk))
        if cancelled:
            self.message_user(
                request,
                f"Cancelled redrive(s) {', '.join(cancelled)}; what they did stays done.",
                messages.SUCCESS,
            )
        if refused:
            self.message_user(request, "Not cancelled: " + "; ".join(refused), messages.WARNING)

    # -- columns and fields

    @admin.display(description="filter")
    def filter(self, obj: Redrive) -> str:
        return redrives.filter_text(obj)

    @admin.display(description="to")
    def target(self, obj: Redrive) -> str:
        return f"queue {obj.destination}" if obj.destination else "its handler"

    @admin.display(description="progress")
    def progress(self, obj: Redrive) -> Any:
        done = redrives.handled(obj)
        shown = max(obj.matched, done, 1)
        return format_html(
            '<progress class="dl-progress" value="{}" max="{}"></progress> {} of {} ({})',
            done,
            shown,
            f"{done:,}",
            f"{obj.matched:,}",
            percent(done, obj.matched),
        )

    @admin.display(description="counts")
    def counts(self, obj: Redrive) -> str:
        return (
            f"{obj.matched:,} matched: {obj.delivered:,} delivered, {obj.failed:,} failed again, "
            f"{obj.dropped:,} dropped, {obj.moved:,} moved, {obj.remaining:,} remaining"
        )

    @admin.display(description="pace")
    def pace(self, obj: Redrive) -> str:
        parts = [f"at most {obj.rate:g}/s" if obj.rate else "no rate limit"]
        if obj.ramp:
            parts.append("ramp " + ",".join(str(step) for step in obj.ramp))
        if obj.stop_after is not None:
            parts.append(f"stops above {obj.stop_after:g}% failing")
        if obj.ignore_backoff:
            parts.append("backoff ignored")
        parts.append(f"concurrency {obj.concurrency}")
        return "; ".join(parts)


def counted_mark(data: Any) -> str:
    """What the filter of a counted plan was, so a changed filter is counted again
    before it is planned (Enter in the search box presses "Redrive")."""
    shown = [data.get(name, "") for name in FILTER_FIELDS]
    return hashlib.sha256(json.dumps(shown).encode()).hexdigest()


def refuse_foreign(request: HttpRequest, form: RedriveForm) -> None:
    """A form error for a queue (or a destination) the user may not redrive: the
    plan is not counted, so it says nothing of the queue's messages."""
    scope = access.scope_of(request.user)
    for field, name in redrives.guarded(form.cleaned_data):
        if not scope.allows(name, redrives.ACTION):
            form.add_error(field, "You may not redrive messages of this queue.")


def _fieldsets(form: RedriveForm) -> helpers.AdminForm:
    """The form in the admin's fieldset markup (a plain form: django-stubs types
    `AdminForm` for model forms only)."""
    model_form: Any = form
    return helpers.AdminForm(model_form, [(None, {"fields": list(form.fields)})], {})


def percent(done: int, matched: int) -> str:
    return f"{100 * done / matched:.0f}%" if matched else "—"


def _back_url(form: RedriveForm) -> str:
    """The queued messages' list the plan came from (its queue), else the whole list."""
    url = reverse("admin:deadletter_queuedmessage_changelist")
    queue = form.data.get("queue") if form.is_bound else None
    return f"{url}?{urlencode({'queue': queue})}" if queue else url
