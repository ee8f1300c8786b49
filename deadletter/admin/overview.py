"""The queue overview and its two operations, "Drain" and "Purge expired".

Each operation is a confirmation page (GET) and a POST with CSRF, allowed to
holders of `deadletter.drain_queuedmessage` only (others get 403); the work
itself is the drain's (`drain.Drainer`) and the queue's (`claims.fetch_msg`,
which drops an expired message by the queue's own rule), bounded by
`DEADLETTER_ADMIN_TIME_BUDGET`: a drain's handler still running when it ends
is given up on.

A user kept to some queues (`queue.access`) sees those only, with totals over
them; Drain offers the configured queues they may retry, Purge expired takes a
queue they may delete in (every such queue when empty).
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.admin import ModelAdmin
from django.contrib.auth import get_permission_codename
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.http import urlencode

from deadletter import drain
from deadletter.admin import rows
from deadletter.conf import conf
from deadletter.drain.policy import Policy, policy_of
from deadletter.models import QueuedMessage
from deadletter.queue import access, browse, claims, incidents
from deadletter.queue.api import queue_names
from deadletter.queue.config import configured_queues, queue_config
from deadletter.reports import overview, queues, summaries
from deadletter.store import counters, sql
from deadletter.wire import keys

MAX_DRAIN_LIMIT = 10_000
PURGE_CHUNK = 200
# Queues shown on one page of the overview, in name order (one index seek each).
QUEUES_PER_PAGE = 50
VIEW_CAUSE = "deadletter.view_cause"


class DrainForm(forms.Form):
    queue = forms.ChoiceField(required=False, help_text="Every configured queue when empty.")
    limit = forms.IntegerField(
        min_value=1,
        max_value=MAX_DRAIN_LIMIT,
        initial=100,
        help_text="At most this many messages are handed to their handlers.",
    )

    def __init__(self, *args: Any, scope: access.Scope | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.scope = scope or access.Scope.everything()
        names = self.scope.names_filter(sorted(configured_queues()), "retry")
        everything = "all configured queues" if self.scope.unrestricted else "all yours"
        field: Any = self.fields["queue"]
        field.choices = [("", everything)] + [(n, n) for n in names]

    def queues(self) -> list[str] | None:
        """The queues to drain: the chosen one, or every configured one (the
        configured ones the scope may retry when it is restricted)."""
        name = self.cleaned_data["queue"] or None
        if name is not None:
            return [name]
        if self.scope.unrestricted:
            return None
        return self.scope.names_filter(sorted(configured_queues()), "retry")


class PurgeForm(forms.Form):
    """The queue is typed, not chosen from every queue's name: clients can make
    100,000 of them."""

    queue = forms.CharField(
        required=False, strip=False, help_text="A queue's name; every queue when empty."
    )

    def __init__(self, *args: Any, scope: access.Scope | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.scope = scope or access.Scope.everything()

    def clean_queue(self) -> str:
        name: str = self.cleaned_data["queue"]
        if name:
            try:
                keys.encode_queue_name(name)
            except ValueError as exc:
                raise forms.ValidationError(str(exc)) from None
            if not self.scope.allows(name, "delete"):
                raise forms.ValidationError("You may not delete messages of that queue.")
        return name

    def queues(self) -> list[str]:
        """The chosen queue, or every queue (every one the scope may delete in)."""
        chosen: str = self.cleaned_data["queue"]
        return [chosen] if chosen else self.scope.names_filter(queue_names(), "delete")


def _context(
    model_admin: ModelAdmin[QueuedMessage], request: HttpRequest, **extra: Any
) -> dict[str, Any]:
    return {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "has_drain_permission": may_drain(model_admin, request),
        "overview_url": reverse("admin:deadletter_overview"),
        "changelist_url": reverse("admin:deadletter_queuedmessage_changelist"),
        "archive_url": reverse("admin:deadletter_archivedmessage_changelist"),
        **extra,
    }


def overview_page(model_admin: ModelAdmin[QueuedMessage], request: HttpRequest) -> HttpResponse:
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    now = rows.now()
    horizon = summaries.horizon_or_default(None)
    scope = access.scope_of(request.user)
    page = _queue_page(request, scope)
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
        totals=overview.totals(now=now) if scope.unrestricted else granted_totals(scope, now),
        restricted=not scope.unrestricted,
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


def _queue_page(request: HttpRequest, scope: access.Scope) -> queues.QueuePage:
    """The page `?after=NAME` or `?before=NAME` asks for (the first page otherwise,
    or when the name is not one a queue can have); of the granted queues only for
    a restricted user."""
    if not scope.unrestricted:
        try:
            return granted_page(scope, request.GET.get("after"), request.GET.get("before"))
        except ValueError:
            return granted_page(scope, None, None)
    try:
        if "before" in request.GET:
            return queues.page_before(request.GET["before"], QUEUES_PER_PAGE)
        return queues.page_after(request.GET.get("after") or None, QUEUES_PER_PAGE)
    except ValueError:
        return queues.page_after(None, QUEUES_PER_PAGE)


def granted_page(scope: access.Scope, after: str | None, before: str | None) -> queues.QueuePage:
    """A page of the queues `scope` may view, as `queues.page_after` / `page_before`
    pages every queue. `ValueError` for an invalid name."""
    size = QUEUES_PER_PAGE
    if before is not None:
        found = scope.granted_names(size + 1, before=before)
        more_after = bool(scope.granted_names(1, after=found[0] if found else None))
        names = found[:size][::-1]
        return queues.QueuePage(names, len(found) > size, more_after)
    found = scope.granted_names(size + 1, after=after or None)
    more_before = bool(after) and bool(scope.granted_names(1, before=after))
    return queues.QueuePage(found[:size], more_before, len(found) > size)


def granted_totals(scope: access.Scope, now: datetime) -> overview.OverviewTotals:
    """The totals over the queues `scope` may view: two counts of their key ranges
    (`Scope.count`: a pattern's matched queues in turn, never a test of every row),
    capped as the overview's are."""
    rows = QueuedMessage.objects.using(conf.DATABASE).order_by()
    cap = overview.COUNT_CAP

    def capped(found: int) -> overview.Count:
        return overview.Count(min(found, cap), found > cap)

    return overview.OverviewTotals(
        capped(scope.count(rows, cap)), capped(scope.count(rows.filter(due_at__gt=now), cap))
    )


def _page_url(direction: str, name: str) -> str:
    return f"{reverse('admin:deadletter_overview')}?{urlencode({direction: name})}"


def may_drain(model_admin: ModelAdmin[QueuedMessage], request: HttpRequest) -> bool:
    """Whether the user may hand messages back to their handlers (the Drain page,
    Retry now): the model's `drain` permission."""
    opts = model_admin.opts
    return request.user.has_perm(f"{opts.app_label}.{get_permission_codename('drain', opts)}")


def _require_drain(model_admin: ModelAdmin[QueuedMessage], request: HttpRequest) -> None:
    if not may_drain(model_admin, request):
        raise PermissionDenied


def drain_page(model_admin: ModelAdmin[QueuedMessage], request: HttpRequest) -> HttpResponse:
    """GET: the confirmation page; POST: a bounded drain of the chosen queue(s)."""
    _require_drain(model_admin, request)
    scope = access.scope_of(request.user)
    form = DrainForm(request.POST if request.method == "POST" else request.GET or None, scope=scope)
    if request.method == "POST" and form.is_valid():
        chosen = form.queues()
        if chosen == []:
            model_admin.message_user(request, "No queue of yours to drain.", messages.WARNING)
            return redirect("admin:deadletter_overview")
        try:
            drainer = drain.Drainer(
                chosen,
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
        form=form
        if form.is_bound
        else DrainForm(initial={"queue": request.GET.get("queue", "")}, scope=scope),
        handlers=drainable(scope),
        restricted=not scope.unrestricted,
    )
    return TemplateResponse(request, "admin/deadletter/queuedmessage/drain_confirm.html", context)


def drainable(scope: access.Scope) -> list[tuple[str, str, str]]:
    """(queue, handler path, policy in words) of each configured queue `scope` may
    retry in: what the Drain page lists. Never the setting as written: a policy
    dict holds alert channels whose webhook secrets sign alerts, and other teams'
    queues are theirs to see."""
    found = []
    for name in scope.names_filter(sorted(configured_queues()), "retry"):
        config = queue_config(name)
        if config is None:
            continue
        words = (
            "policy not valid: see manage.py check"
            if config.problems
            else policy_words(policy_of(config))
        )
        path = config.handler
        found.append((name, path if isinstance(path, str) else "(not a dotted path)", words))
    return found


def policy_words(policy: Policy) -> str:
    """A queue's delivery limits as an operator reads them: "3 attempts, backoff
    60 s up to 1 h, breaker 5"."""
    attempts = (
        "no attempt limit"
        if policy.max_attempts is None
        else f"{policy.max_attempts} attempt{'s' if policy.max_attempts != 1 else ''}"
    )
    if policy.backoff is None:
        backoff = "no backoff"
    else:
        first, most = policy.backoff
        backoff = f"backoff {_seconds(first)}" + (
            f" up to {_seconds(most)}" if most != first else ""
        )
    breaker = "no breaker" if policy.breaker is None else f"breaker {policy.breaker}"
    return f"{attempts}, {backoff}, {breaker}"


def _seconds(value: float) -> str:
    for unit, size in (("h", 3600), ("min", 60)):
        if value >= size and value % size == 0:
            return f"{value / size:g} {unit}"
    return f"{value:g} s"


def purge_page(model_admin: ModelAdmin[QueuedMessage], request: HttpRequest) -> HttpResponse:
    """GET: the confirmation page; POST: drop the expired messages of the chosen queue(s)."""
    _require_drain(model_admin, request)
    scope = access.scope_of(request.user)
    form = PurgeForm(request.POST if request.method == "POST" else None, scope=scope)
    if request.method == "POST" and form.is_valid():
        names = form.queues()
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
        form=form
        if form.is_bound
        else PurgeForm(initial={"queue": request.GET.get("queue", "")}, scope=scope),
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
