"""The admin's "Retry now", of one message (its page) or of a selection (the
action): the rows handed over through `drain.redeliver` within the admin's time
budget, the outcome told to the user and logged in each row's History.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.templatetags.admin_urls import add_preserved_filters
from django.contrib.admin.utils import unquote
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext as _

from deadletter import drain
from deadletter.admin import access, bulk, rows
from deadletter.conf import conf
from deadletter.drain import retry
from deadletter.models import HexKey, QueuedMessage
from deadletter.queue import browse, redaction
from deadletter.wire import keys


def retry_page(
    model_admin: admin.ModelAdmin[QueuedMessage], request: HttpRequest, object_id: str
) -> HttpResponse:
    """The message page's "Retry now": one row through `drain.redeliver`, its
    handler given up on after the admin's time budget."""
    obj = model_admin.get_object(request, object_id)
    if obj is None:  # what Django's own views answer for a row gone
        gone = _("%(name)s with ID “%(key)s” doesn’t exist. Perhaps it was deleted?")
        key = unquote(object_id)
        model_admin.message_user(
            request, gone % {"name": model_admin.opts.verbose_name, "key": key}, messages.WARNING
        )
        return HttpResponseRedirect(reverse("admin:index", current_app=model_admin.admin_site.name))
    retry_one(model_admin, request, obj.key_bytes)
    context: dict[str, Any] = {
        "preserved_filters": model_admin.get_preserved_filters(request),
        "opts": model_admin.opts,
    }
    if model_admin.get_queryset(request).filter(key=obj.key_bytes).exists():
        url = reverse("admin:deadletter_queuedmessage_change", args=[obj.key_hex])
    else:
        url = reverse("admin:deadletter_queuedmessage_changelist")
    return HttpResponseRedirect(add_preserved_filters(context, url))


def retry_one(
    model_admin: admin.ModelAdmin[QueuedMessage], request: HttpRequest, key: bytes
) -> None:
    """Row `key` handed over now (Retry now, Save and retry now), its outcome
    told to the user and logged on the row."""
    try:
        deadline = time.monotonic() + conf.ADMIN_TIME_BUDGET
        report = drain.redeliver(
            [key],
            deadline=deadline,
            on_outcome=outcome_logger(model_admin, request),
            actor=retry.retry_actor(request.user),
        )
    except (drain.DrainConfigError, drain.DrainLocked) as exc:
        model_admin.message_user(request, str(exc), messages.ERROR)
    else:
        model_admin.message_user(request, retried_text(report), retried_level(report))


def retry_selected(
    model_admin: admin.ModelAdmin[QueuedMessage],
    request: HttpRequest,
    queryset: QuerySet[QueuedMessage],
) -> TemplateResponse | None:
    """Hand the selected rows to their handlers with a drain's rules (at least
    once; a drain running on the same SQLite queue makes this refuse), a
    chunk at a time until the admin's time budget is spent. "All matching" (more
    than a page of rows) asks first, as Delete does, saying how many."""
    queryset = access.within(
        model_admin, request, queryset, retry.ACTION, chosen=access.posted(request)
    )
    if request.POST.get("select_across") == "1" and request.POST.get("post") != "yes":
        return confirm_all(model_admin, request, queryset)
    try:
        progress = bulk.retry(
            queryset,
            outcome_logger(model_admin, request),
            actor=retry.retry_actor(request.user),
        )
    except (drain.DrainConfigError, drain.DrainLocked) as exc:
        model_admin.message_user(request, str(exc), messages.ERROR)
        return None
    report = progress.report or drain.DrainReport(queues=[])
    text = retried_text(report)
    level = retried_level(report)
    if progress.left:
        why = "" if progress.stopped_by == "hung handlers" else " after the time budget"
        text += (
            f" Stopped{why}: {progress.left_text} selected message(s) "
            "left for deadletter_drain (or select them again)."
        )
        level = messages.WARNING
    model_admin.message_user(request, text, level)
    return None


def confirm_all(
    model_admin: admin.ModelAdmin[QueuedMessage],
    request: HttpRequest,
    queryset: QuerySet[QueuedMessage],
) -> TemplateResponse | None:
    """The confirmation of a retry of every matching row: how many (counted up to
    `bulk.LEFT_CAP`) and the first of them; nothing to confirm when none matches."""
    found = bulk.confirmation(queryset, select_across=True)
    if found.empty:
        model_admin.message_user(request, "Nothing to retry.", messages.WARNING)
        return None
    context = {
        **model_admin.admin_site.each_context(request),
        "title": "Are you sure?",
        "opts": model_admin.opts,
        "found": found,
        "action": "retry_now",
        "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "form_url": request.get_full_path(),
    }
    return TemplateResponse(
        request, "admin/deadletter/queuedmessage/retry_selected_confirmation.html", context
    )


def outcome_logger(
    model_admin: admin.ModelAdmin[QueuedMessage], request: HttpRequest
) -> Callable[[bytes, drain.Outcome], None]:
    """Each retried row's outcome as a `LogEntry` on it, in its History and the
    admin's Recent actions ("Retried: delivered", "Retried: failed: …")."""

    def log(key: bytes, outcome: drain.Outcome) -> None:
        text = f"Retried: {RETRY_OUTCOMES.get(outcome, str(outcome))}"
        if outcome in (drain.Outcome.FAILED, drain.Outcome.HELD):
            error = rows.last_error(_current(key))
            text += f": {error[: rows.ERROR_SHOWN]}" if error else ""
        model_admin.log_change(request, QueuedMessage(key=HexKey(key)), text)

    return log


RETRY_OUTCOMES = {
    drain.Outcome.DELIVERED: "delivered",
    drain.Outcome.REQUEUED: "partly delivered, the rest parked again",
    drain.Outcome.FAILED: "failed",
    drain.Outcome.HELD: "kept for an operator",
    drain.Outcome.PERMANENT: "dropped (permanent failure)",
    drain.Outcome.MAX_ATTEMPTS: "dropped (max attempts)",
    drain.Outcome.EXPIRED: "dropped (expired)",
    drain.Outcome.CORRUPT: "dropped (corrupt)",
}


def _current(key: bytes) -> Any:
    """The first message of row `key` as it is now (after a failed retry), masked as
    for any viewer of the History it is logged to (`redaction`), or None."""
    row = browse.get_row(key)
    if row is None or not row.messages:
        return None
    return redaction.redacted(row.messages[0], keys.queue_of(key), reveal=False)


def retried_text(report: drain.DrainReport) -> str:
    text = (
        f"Retried {report.handled} message(s): {report.delivered} delivered, "
        f"{report.requeued} partly delivered, {report.failed} still failing, "
        f"{report.held} kept for an operator, {sum(report.dropped.values())} dropped."
    )
    if report.held:
        text += " A message kept for an operator says why in its last error."
    if report.stopped_by == "hung handlers":
        text += (
            f" No handler was started after that: {drain.hung_handlers()} handler(s) that "
            "did not return in time still run in this server process."
        )
    return text


def retried_level(report: drain.DrainReport) -> int:
    hung = report.stopped_by == "hung handlers"
    trouble = report.failed or report.held or report.errors
    return messages.WARNING if trouble or hung else messages.SUCCESS
