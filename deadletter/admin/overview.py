"""The queue overview and its two operations, "Drain" and "Purge expired".

Each operation is a confirmation page (GET) and a POST with CSRF, allowed to
holders of `deadletter.drain_queuedmessage` only (others get 403); the work
itself is the drain's (`drain.Drainer`) and the queue's (`claims.fetch_msg`,
which drops an expired message by the queue's own rule), bounded by
`DEADLETTER_ADMIN_TIME_BUDGET`: a drain's handler still running when it ends
is given up on.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from django import forms
from django.contrib import messages
from django.contrib.admin import AdminSite
from django.core.exceptions import PermissionDenied
from django.db.models.options import Options
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.http import urlencode

from deadletter import drain
from deadletter.admin import rows
from deadletter.conf import conf
from deadletter.queue import browse, claims, incidents
from deadletter.queue.api import queue_names
from deadletter.reports import overview, queues, summaries
from deadletter.store import counters, sql
from deadletter.wire import keys

MAX_DRAIN_LIMIT = 10_000
PURGE_CHUNK = 200
# Queues shown on one page of the overview, in name order (one index seek each).
QUEUES_PER_PAGE = 50
VIEW_CAUSE = "deadletter.view_cause"


class QueuedMessageAdmin(Protocol):
    """What these pages need of `deadletter.admin.QueuedMessageAdmin`, which
    imports them: typing against it here would close an import cycle."""

    @property
    def admin_site(self) -> AdminSite: ...

    @property
    def opts(self) -> Options[Any]: ...

    def has_view_permission(self, request: HttpRequest) -> bool: ...

    def has_drain_permission(self, request: HttpRequest) -> bool: ...

    def message_user(self, request: HttpRequest, message: str, level: int | str = ...) -> None: ...


class DrainForm(forms.Form):
    queue = forms.ChoiceField(required=False, help_text="Every configured queue when empty.")
    limit = forms.IntegerField(
        min_value=1,
        max_value=MAX_DRAIN_LIMIT,
        initial=100,
        help_text="At most this many messages are handed to their handlers.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        names = sorted(conf.HANDLERS)
        field: Any = self.fields["queue"]
        field.choices = [("", "all configured queues")] + [(n, n) for n in names]


class PurgeForm(forms.Form):
    """The queue is typed, not chosen from every queue's name: clients can make
    100,000 of them."""

    queue = forms.CharField(
        required=False, strip=False, help_text="A queue's name; every queue when empty."
    )

    def clean_queue(self) -> str:
        name: str = self.cleaned_data["queue"]
        if name:
            try:
                keys.encode_queue_name(name)
            except ValueError as exc:
                raise forms.ValidationError(str(exc)) from None
        return name


def _context(model_admin: QueuedMessageAdmin, request: HttpRequest, **extra: Any) -> dict[str, Any]:
    return {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "has_drain_permission": model_admin.has_drain_permission(request),
        "overview_url": reverse("admin:deadletter_overview"),
        "changelist_url": reverse("admin:deadletter_queuedmessage_changelist"),
        "archive_url": reverse("admin:deadletter_archivedmessage_changelist"),
        **extra,
    }


def overview_page(model_admin: QueuedMessageAdmin, request: HttpRequest) -> HttpResponse:
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    now = rows.now()
    horizon = summaries.horizon_or_default(None)
    page = _queue_page(request)
    shown = overview.overview(page.names, now=now, horizon=horizon)
    dropped = counters.drop_counts(sql.connection(), [q.name for q in shown])
    known = _causes_of(request, shown)
    listed = [
        {
            "q": q,
            "causes": [(c, *known.get((q.name, c.signature), (None, ""))) for c in q.causes],
            "parked": rows.render_time(q.oldest_enqueued),
            "age": rows.ago(q.oldest_enqueued, now),
            "failure": rows.render_time(q.oldest_failure),
            "failure_age": rows.ago(q.oldest_failure, now),
            "dropped": [
                (reason.replace("_", " "), n) for reason, n in dropped.get(q.name, {}).items() if n
            ],
        }
        for q in shown
    ]
    context = _context(
        model_admin,
        request,
        title="Queue overview",
        queues=listed,
        max_age=rows.duration(conf.MAX_QUEUE_AGE),
        horizon=rows.duration(horizon),
        count_cap=f"{overview.COUNT_CAP:,}",
        max_causes=overview.MAX_CAUSES,
        totals=overview.totals(now=now),
        page_size=QUEUES_PER_PAGE,
        first_url=reverse("admin:deadletter_overview") if page.more_before else None,
        previous_url=_page_url("before", page.names[0]) if page.more_before else None,
        next_url=_page_url("after", page.names[-1]) if page.more_after else None,
        no_handler=[q.name for q in shown if q.no_handler],
        may_view_causes=request.user.has_perm(VIEW_CAUSE),
    )
    return TemplateResponse(request, "admin/deadletter/queuedmessage/overview.html", context)


def _causes_of(
    request: HttpRequest, shown: list[overview.QueueOverview]
) -> dict[tuple[str, str], tuple[str, str]]:
    """The page's causes as incidents: (queue, signature) -> (the cause's admin page,
    its status now); nothing for a user who may not view causes."""
    if not request.user.has_perm(VIEW_CAUSE):
        return {}
    found = incidents.for_queues([q.name for q in shown if q.causes])
    return {
        pair: (
            reverse("admin:deadletter_cause_change", args=[cause.pk]),
            incidents.effective_status(cause),
        )
        for pair, cause in found.items()
    }


def _queue_page(request: HttpRequest) -> queues.QueuePage:
    """The page `?after=NAME` or `?before=NAME` asks for (the first page otherwise,
    or when the name is not one a queue can have)."""
    try:
        if "before" in request.GET:
            return queues.page_before(request.GET["before"], QUEUES_PER_PAGE)
        return queues.page_after(request.GET.get("after") or None, QUEUES_PER_PAGE)
    except ValueError:
        return queues.page_after(None, QUEUES_PER_PAGE)


def _page_url(direction: str, name: str) -> str:
    return f"{reverse('admin:deadletter_overview')}?{urlencode({direction: name})}"


def _require_drain(model_admin: QueuedMessageAdmin, request: HttpRequest) -> None:
    if not model_admin.has_drain_permission(request):
        raise PermissionDenied


def drain_page(model_admin: QueuedMessageAdmin, request: HttpRequest) -> HttpResponse:
    """GET: the confirmation page; POST: a bounded drain of the chosen queue(s)."""
    _require_drain(model_admin, request)
    form = DrainForm(request.POST if request.method == "POST" else request.GET or None)
    if request.method == "POST" and form.is_valid():
        name = form.cleaned_data["queue"] or None
        try:
            drainer = drain.Drainer(
                [name] if name else None,
                drain.DrainOptions(limit=form.cleaned_data["limit"], budget=conf.ADMIN_TIME_BUDGET),
                log_progress=False,
            )
            report = drainer.run()
        except (drain.DrainConfigError, drain.DrainLocked) as exc:
            model_admin.message_user(request, str(exc), messages.ERROR)
        else:
            text = (
                f"Drained {report.handled} message(s): {report.delivered} delivered, "
                f"{report.requeued} partly delivered, {report.failed} still failing, "
                f"{report.held} kept for an operator, {sum(report.dropped.values())} dropped."
            )
            if report.stopped_by == "time budget":
                text += " Stopped after the time budget; run deadletter_drain for the rest."
            elif report.stopped_by == "hung handlers":
                text += (
                    f" Stopped: {drain.hung_handlers()} handler(s) that did not return in "
                    "time still run in this server process; run deadletter_drain for the rest."
                )
            level = messages.WARNING if report.exit_code else messages.SUCCESS
            model_admin.message_user(request, text, level)
        return redirect("admin:deadletter_overview")
    context = _context(
        model_admin,
        request,
        title="Drain: are you sure?",
        form=form if form.is_bound else DrainForm(initial={"queue": request.GET.get("queue", "")}),
        handlers=sorted(conf.HANDLERS.items()),
    )
    return TemplateResponse(request, "admin/deadletter/queuedmessage/drain_confirm.html", context)


def purge_page(model_admin: QueuedMessageAdmin, request: HttpRequest) -> HttpResponse:
    """GET: the confirmation page; POST: drop the expired messages of the chosen queue(s)."""
    _require_drain(model_admin, request)
    form = PurgeForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        chosen = form.cleaned_data["queue"]
        names = [chosen] if chosen else queue_names()
        purged, finished = purge_expired(names)
        text = f"Purged {purged} expired message(s)."
        if not finished:
            text += " Stopped after the time budget; purge again (or drain) for the rest."
        model_admin.message_user(request, text, messages.SUCCESS if finished else messages.WARNING)
        return redirect("admin:deadletter_overview")
    context = _context(
        model_admin,
        request,
        title="Purge expired: are you sure?",
        form=form if form.is_bound else PurgeForm(initial={"queue": request.GET.get("queue", "")}),
        max_age=rows.duration(conf.MAX_QUEUE_AGE),
    )
    return TemplateResponse(request, "admin/deadletter/queuedmessage/purge_confirm.html", context)


def purge_expired(names: list[str]) -> tuple[int, bool]:
    """Hand each row parked before the age cutoff to `claims.fetch_msg`, which drops
    an expired message by the queue's rule (and leaves any other alone); each row
    is its own transaction. Returns (rows dropped, finished within the budget)."""
    deadline = time.monotonic() + conf.ADMIN_TIME_BUDGET
    purged = 0
    for name in names:
        try:
            keys.encode_queue_name(name)
        except ValueError:
            continue
        after: bytes | None = None
        while True:
            found = browse.expired_keys(name, after=after, limit=PURGE_CHUNK)
            for key in found:
                if time.monotonic() >= deadline:
                    return purged, False
                if claims.fetch_msg(key) is None and not _exists(key):
                    purged += 1
            if len(found) < PURGE_CHUNK:
                break
            after = found[-1]
    return purged, True


def _exists(key: bytes) -> bool:
    return browse.get_row(key) is not None
