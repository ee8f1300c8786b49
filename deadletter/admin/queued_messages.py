"""The admin of the queued messages: the operator's console over the queue.

Rows are listed in key order (the order messages were parked, oldest first)
straight off the primary-key index, a page at a time by key, never counted;
the key travels in URLs and forms as hex because the model's key field says
so (`models.HexKeyField`). Deleting goes through `archive.discard` (the message
kept in Archived messages, `admin.archive`, unless its queue's archive is off)
and retrying through `drain.redeliver` (`retries`), so signals and logs match the
drain's; bulk work is chunked and bounded in time (`bulk`), and the views that do
it run outside the request's transaction (`drain.outside_request_transactions`),
each row settled on its own. The queue overview (`overview`) adds per-queue ages,
expiries and failures grouped by cause.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.templatetags.admin_urls import add_preserved_filters
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.views.decorators.http import require_POST

from deadletter import drain
from deadletter.admin import (
    access,
    archive,
    bulk,
    edits,
    overview,
    redrives,
    retries,
    rows,
    searching,
)
from deadletter.admin.changelist import CauseFilter, KeysetChangeList, QueueFilter
from deadletter.admin.timeline import timeline_html
from deadletter.conf import conf
from deadletter.models import QueuedMessage
from deadletter.queue import edits as queue_edits
from deadletter.queue import redaction, search
from deadletter.queue.archive import discard
from deadletter.wire import gotime, keys

KEY_LOOKUPS = frozenset({"key", "key__exact", "key__gt", "key__gte", "key__lt", "key__lte"})


FILTER_PARAMETERS = frozenset({QueueFilter.parameter_name, CauseFilter.parameter_name})


@admin.register(QueuedMessage)
class QueuedMessageAdmin(admin.ModelAdmin):
    list_display = [
        "parked",
        "queue_name",
        "subject",
        "recipient",
        "code",
        "first_failure",
        "age",
        "expires_in",
        "attempts",
        "last_error",
    ]
    list_display_links = ["parked"]
    list_filter = [QueueFilter, CauseFilter]
    # Shows Django's search box; the search itself is `queue.search`'s
    # (`get_search_results` leaves the queryset to the change list's pages).
    search_fields = ("key",)
    search_help_text = searching.HELP
    ordering = ["key"]
    sortable_by = ()
    list_per_page = 50
    show_full_result_count = False
    # Facet counts would count every filter choice over the whole table.
    show_facets = admin.ShowFacets.NEVER
    fields = ("key_parts", "stored", "next_due", "decoded", "attempt_history")
    save_on_top = True  # Delete above the fold too, beside Retry now
    readonly_fields = fields
    actions = ["retry_now", "delete_selected"]

    class Media:
        css = {"all": ["deadletter/admin.css"]}

    # -- permissions and lookups

    def has_drain_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("deadletter.drain_queuedmessage")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        """Only key comparisons (hex) may come from the query string: anything else
        is refused with a 400 instead of reaching the database."""
        return lookup in KEY_LOOKUPS or lookup in FILTER_PARAMETERS

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        allowed = super().has_delete_permission(request, obj)
        return allowed and (obj is None or access.scope(request).allows(obj.queue, "delete"))

    def get_queryset(self, request: HttpRequest) -> QuerySet[QueuedMessage]:
        """The rows of the queues the user may view (`admin.access`): all of them for
        a superuser, or when no `QueueAccess` row exists."""
        rows = QueuedMessage.objects.using(conf.DATABASE).order_by(*self.get_ordering(request))
        scope = access.scope(request)
        return rows if scope.unrestricted else rows.filter(scope.queue_q("view"))

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return KeysetChangeList

    def get_changelist_instance(self, request: HttpRequest) -> ChangeList:
        changelist = super().get_changelist_instance(request)
        rows.show_to(changelist.result_list, request.user)
        return changelist

    def get_object(self, request: HttpRequest, object_id: str, from_field: Any = None) -> Any:
        obj = super().get_object(request, object_id, from_field)
        if obj is not None:
            rows.show_to([obj], request.user)
        return obj

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [
            path("overview/", wrap(self.overview_view), name="deadletter_overview"),
            path("overview/drain/", wrap(self.drain_view), name="deadletter_drain"),
            path("overview/purge/", wrap(self.purge_view), name="deadletter_purge"),
            path(
                "<path:object_id>/retry/",
                wrap(require_POST(self.retry_view)),
                name="deadletter_queuedmessage_retry",
            ),
            path(
                "<path:object_id>/edit/",
                wrap(self.edit_view),
                name="deadletter_queuedmessage_edit",
            ),
            *super().get_urls(),
        ]

    # -- pages

    @drain.outside_request_transactions
    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        context = {
            "overview_url": reverse("admin:deadletter_overview"),
            "redrive_url": redrives.plan_link(request),
            "archive_url": archive.archive_link(request),
            **(extra_context or {}),
        }
        return super().changelist_view(request, context)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> Any:
        access.require(request, object_id)
        queue = access.key_queue(object_id) or ""
        scope = access.scope(request)
        context = {
            "has_drain_permission": self.has_drain_permission(request)
            and scope.allows(queue, "retry"),
            "can_edit": edits.can_edit_text(request, object_id)
            and scope.allows(queue, queue_edits.ACCESS),
            **(extra_context or {}),
        }
        return super().change_view(request, object_id, form_url, context)

    def history_view(self, request: HttpRequest, object_id: str, extra_context: Any = None) -> Any:
        access.require(request, object_id)
        return super().history_view(request, object_id, extra_context)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[QueuedMessage], search_term: str
    ) -> tuple[QuerySet[QueuedMessage], bool]:
        return queryset, False

    def response_action(
        self, request: HttpRequest, queryset: QuerySet[Any], *args: Any, **kwargs: Any
    ) -> Any:
        """Actions on posted keys that are not hex are refused with one message; an
        action on all rows a search matches acts on exactly those."""
        try:
            if request.POST.get("select_across") == "1" and request.GET.get("q", "").strip():
                query = searching.query_of(request, request.GET.get(CauseFilter.parameter_name))
                queue = request.GET.get(QueueFilter.parameter_name) or None
                reveal = redaction.reveals(request.user)
                spans = access.scope(request).spans()
                queryset = searching.searched_rows(
                    queryset, query, queue, reveal=reveal, spans=spans
                )
            return super().response_action(request, queryset, *args, **kwargs)
        except (searching.SearchTooBroad, search.SearchError) as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())
        except (ValueError, ValidationError):
            self.message_user(request, "The selection holds a key that is not hex.", messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    def overview_view(self, request: HttpRequest) -> HttpResponse:
        return overview.overview_page(self, request)

    @drain.outside_request_transactions
    def drain_view(self, request: HttpRequest) -> HttpResponse:
        return overview.drain_page(self, request)

    @drain.outside_request_transactions
    def purge_view(self, request: HttpRequest) -> HttpResponse:
        return overview.purge_page(self, request)

    @drain.outside_request_transactions
    def retry_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The message page's "Retry now" (`retries.retry_page`), for holders of the
        drain permission who may retry in the message's queue."""
        access.require(request, object_id, "retry")
        if not self.has_drain_permission(request):
            raise PermissionDenied
        return retries.retry_page(self, request, object_id)

    @drain.outside_request_transactions
    def edit_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The message page's "Edit" (`edits`); "Save and retry now" as Retry now."""
        access.require(request, object_id, queue_edits.ACCESS)
        retry = partial(retries.retry_one, self)
        return edits.edit_page(self, request, object_id, retry, self.has_drain_permission(request))

    # -- actions

    @admin.action(description="Retry selected messages now", permissions=["drain"])
    def retry_now(
        self, request: HttpRequest, queryset: QuerySet[QueuedMessage]
    ) -> TemplateResponse | None:
        """Hand the selected rows to their handlers (`retries.retry_selected`)."""
        return retries.retry_selected(self, request, queryset)

    @admin.action(description="Delete selected queued messages", permissions=["delete"])
    def delete_selected(
        self, request: HttpRequest, queryset: QuerySet[QueuedMessage]
    ) -> TemplateResponse | None:
        """Delete the selection through `queue.dequeue` after a confirmation page
        that names the rows (or, for "all matching", the filter and a sample)."""
        queryset = access.within(self, request, queryset, "delete", chosen=access.posted(request))
        if request.POST.get("post") == "yes":
            progress = bulk.delete(
                queryset,
                lambda chunk: self._log_deleted(request, chunk),
                actor=request.user.get_username(),
            )
            text = f"Successfully deleted {progress.done} queued message(s)."
            if progress.left:
                why = "the database failed" if progress.stopped_by else "after the time budget"
                text += f" Stopped {why}: {progress.left_text} left; select them again to go on."
            self.message_user(
                request, text, messages.WARNING if progress.left else messages.SUCCESS
            )
            return None
        select_across = request.POST.get("select_across") == "1"
        found = bulk.confirmation(queryset, select_across=select_across)
        if found.empty:
            self.message_user(request, "Nothing to delete.", messages.WARNING)
            return None
        queue = request.GET.get(QueueFilter.parameter_name) or None
        scope = access.scope(request)
        fate = archive.fate(
            ([queue] if queue else None) if select_across else found.queues,
            one=found.chosen == 1,
            scope=None if scope.unrestricted else scope,
        )
        context = {
            **self.admin_site.each_context(request),
            "title": "Are you sure?",
            "opts": self.opts,
            "found": found,
            "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
            "fate": fate,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "form_url": request.get_full_path(),
        }
        return TemplateResponse(
            request, "admin/deadletter/queuedmessage/delete_selected_confirmation.html", context
        )

    def _log_deleted(self, request: HttpRequest, chunk: list[bytes]) -> None:
        self.log_deletions(request, self.get_queryset(request).filter(key__in=chunk))

    def response_delete(self, request: HttpRequest, obj_display: str, obj_id: Any) -> Any:
        """Back to the list the operator came from, its filters kept (Django sends
        a user without the change permission, which no one has here, to the index)."""
        response = super().response_delete(request, obj_display, obj_id)
        if not self.has_view_permission(request):
            return response
        url = reverse("admin:deadletter_queuedmessage_changelist")
        url = add_preserved_filters(
            {"preserved_filters": self.get_preserved_filters(request), "opts": self.opts}, url
        )
        return HttpResponseRedirect(url)

    def delete_view(self, request: HttpRequest, object_id: str, extra_context: Any = None) -> Any:
        """Django's delete page, saying where the message goes (`archive.fate`)."""
        access.require(request, object_id, "delete")
        context = {"fate": archive.fate(_queues_of([object_id]), one=True), **(extra_context or {})}
        return super().delete_view(request, object_id, context)

    def delete_model(self, request: HttpRequest, obj: QueuedMessage) -> None:
        discard(obj.key_bytes, actor=request.user.get_username())

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[QueuedMessage]) -> None:
        bulk.delete(queryset, lambda chunk: None, actor=request.user.get_username())

    # -- columns

    @admin.display(description="parked (by queue, oldest first)")
    def parked(self, obj: QueuedMessage) -> Any:
        """When the row was parked, to the second, so neighbours tell apart; the list
        is in key order, queue by queue, and the header says so."""
        when = obj.enqueued_at
        return rows.render_time_seconds(when) if when is not None else "legacy row"

    @admin.display(description="queue")
    def queue_name(self, obj: QueuedMessage) -> str:
        return obj.queue

    @admin.display(description="subject")
    def subject(self, obj: QueuedMessage) -> Any:
        msgs = rows.messages_of(obj)
        if msgs is None:
            return format_html("<strong>{}</strong>", "corrupt row")
        if obj.is_legacy or len(msgs) != 1:
            return f"{len(msgs)} messages: split at next fetch"
        return rows.clipped(msgs[0].subject)

    @admin.display(description="recipient")
    def recipient(self, obj: QueuedMessage) -> Any:
        msg = rows.first(obj)
        return rows.clipped(msg.username if msg else "", break_before="@")

    @admin.display(description="code")
    def code(self, obj: QueuedMessage) -> Any:
        msg = rows.first(obj)
        return rows.code_name(msg.code) if msg else rows.EMPTY

    @admin.display(description="first failure")
    def first_failure(self, obj: QueuedMessage) -> Any:
        msg = rows.first(obj)
        return rows.render_time(msg.queued_at) if msg else rows.EMPTY

    @admin.display(description="age")
    def age(self, obj: QueuedMessage) -> str:
        msg = rows.first(obj)
        return rows.age(msg.queued_at, self._now()) if msg else rows.EMPTY

    @admin.display(description="expires in")
    def expires_in(self, obj: QueuedMessage) -> str:
        msg = rows.first(obj)
        return rows.expires_in(msg.queued_at, self._now()) if msg else rows.EMPTY

    @admin.display(description="attempts")
    def attempts(self, obj: QueuedMessage) -> Any:
        """The count, and under it when a backoff next lets the drain hand it over."""
        count = rows.attempts(rows.first(obj))
        due = obj.due_at
        if due is None or due <= self._now():
            return count
        return format_html(
            '{}<br><span class="dl-age" title="next due {}">waits {}</span>',
            count,
            rows.render_time(due),
            rows.span(gotime.epoch_ns(due) - gotime.epoch_ns(self._now())),
        )

    @admin.display(description="last error")
    def last_error(self, obj: QueuedMessage) -> Any:
        return rows.short_error(rows.last_error(rows.first(obj)))

    @admin.display(description="next due")
    def next_due(self, obj: QueuedMessage) -> Any:
        """When a backoff next lets the drain hand the message over; "now" when
        nothing holds it back (the admin's Retry never waits)."""
        due = obj.due_at
        return due if due is not None and due > self._now() else "now"

    def _now(self) -> Any:
        return rows.now()

    # -- the message page

    @admin.display(description="key")
    def key_parts(self, obj: QueuedMessage) -> SafeString:
        return rows.key_parts(obj.key_bytes)

    @admin.display(description="stored size")
    def stored(self, obj: QueuedMessage) -> str:
        return f"{len(obj.key_bytes) + len(bytes(obj.value or b'')):,} bytes (key and value)"

    @admin.display(description="messages")
    def decoded(self, obj: QueuedMessage) -> SafeString:
        return rows.messages_html(obj)

    @admin.display(description="attempts")
    def attempt_history(self, obj: QueuedMessage) -> SafeString:
        return timeline_html(obj.key_bytes, rows.scrubber_of(obj))


def _queues_of(texts: list[str]) -> list[str]:
    """The queues of the keys an action or a URL names in hex (none of a bad one)."""
    found = []
    for text in texts:
        try:
            found.append(keys.queue_of(keys.from_text(unquote(text))))
        except ValueError:
            continue
    return found
