"""Archived messages in the admin: what left a queue other than by delivery
(`queue.archive`), listed newest first a page at a time (`archive_changelist`),
each shown as the live message page shows it, with why, by whom and when.

Restore (the page's button and a bulk action) needs
`deadletter.restore_archivedmessage` and goes through `archive.restore`, saying
when a message got a fresh key; delete for good is Django's delete under
`delete_archivedmessage`, in bounded chunks. Both are `LogEntry`s. Nothing is
added or changed here. A user kept to some queues (`queue.access`) sees the
entries of the queues they may view, restores where they may retry and deletes
for good where they may delete.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.views.main import SEARCH_VAR, ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from deadletter import drain
from deadletter.admin import archive_changelist, bulk, rows, timeline
from deadletter.admin.access import posted, within
from deadletter.admin.access import scope as scope_of
from deadletter.admin.archive_changelist import ArchiveChangeList
from deadletter.admin.bulk import CHUNK
from deadletter.conf import conf
from deadletter.models import ArchivedMessage, HexKey, QueuedMessage
from deadletter.queue import archive, limits
from deadletter.queue.access import Scope
from deadletter.queue.config import queue_configs
from deadletter.wire import keys

TEMPLATES = "admin/deadletter/archivedmessage"


def row_of(obj: ArchivedMessage) -> QueuedMessage:
    """The entry as the live row it was (its key and bytes): what `rows` renders,
    decoded once per request."""
    if not hasattr(obj, "_row"):
        obj._row = QueuedMessage(key=HexKey(bytes(obj.key)), value=bytes(obj.value or b""))  # type: ignore[attr-defined]
    row: QueuedMessage = obj._row  # type: ignore[attr-defined]
    return row


def archive_link(request: HttpRequest) -> str | None:
    """The live list's link to Archived messages, its queue filter carried; None for
    a user who may not view the archive."""
    if not request.user.has_perm(archive.VIEW):
        return None
    url = reverse("admin:deadletter_archivedmessage_changelist")
    name = request.GET.get(archive_changelist.QueueFilter.parameter_name)
    return f"{url}?{urlencode({'queue': name})}" if name else url


def kept_for(kept: timedelta | None) -> str | None:
    """A retention in words ("for 30 days", "for ever"); None for the archive off."""
    if kept is None:
        return "for ever"
    return None if kept == limits.ARCHIVE_OFF else f"for {rows.duration(kept)}"


def fate(queues: Iterable[str] | None, *, one: bool = False, scope: Scope | None = None) -> str:
    """What deleting messages of `queues` (None: of any queue, of those `scope` may
    view when given) does to them, for a confirmation page: each queue's
    `archive_for`, or deleted for good where the archive is off."""
    own = [n for n in _queues_with_own_retention() if scope is None or scope.allows(n)]
    named = sorted(set(queues)) if queues is not None else sorted(own)
    groups: dict[str | None, list[str]] = {}
    for name in named:
        groups.setdefault(kept_for(limits.archive_for(name)), []).append(name)
    if queues is None:
        default = kept_for(conf.ARCHIVE_FOR)
        groups.pop(default, None)
        groups = {default: [], **groups}
    subject, verb, goes = ("It", "is", "goes") if one else ("They", "are", "go")

    def said(words: str | None) -> str:
        if words is None:
            return f"{verb} deleted for good (no archive is kept)"
        return f"{goes} to Archived messages {words}, where {subject.lower()} can be restored"

    if len(groups) == 1:
        (words,) = groups
        return f"{subject} {said(words)}."
    parts = []
    for words, names in groups.items():
        whose = f"those of {', '.join(names)}" if names else "those of other queues"
        parts.append(f"{whose} {said(words)}")
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def _queues_with_own_retention() -> list[str]:
    return [config.name for config in queue_configs() if config.own_policy]


def restored_text(entry_queue: str, restored: archive.Restored) -> str:
    if restored.moved:
        return (
            f"Restored to queue {entry_queue} under a fresh key, {restored.key.hex()}, at the "
            "queue's tail: its own key was taken again."
        )
    if restored.replaced:
        return (
            f"Restored to queue {entry_queue} under its own key in place of another copy of this "
            "message, which is now in the archive (reason edited)."
        )
    return f"Restored to queue {entry_queue} under its own key, in its place in the order."


@admin.register(ArchivedMessage)
class ArchivedMessageAdmin(admin.ModelAdmin):
    list_display = [
        "parked",
        "queue_name",
        "subject",
        "reason",
        "actor",
        "archived",
        "last_error_cut",
    ]
    list_display_links = ["parked"]
    list_filter = list(archive_changelist.FILTERS)
    search_fields = ("key",)  # shows the search box; the search is `archive_pages`'
    search_help_text = archive_changelist.SEARCH_HELP
    ordering = ["-archived_at", "-id"]
    sortable_by = ()
    list_per_page = 50
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    fields = ("key_parts", "left", "error", "decoded", "attempts")
    readonly_fields = fields
    actions = ["restore_selected", "delete_selected"]

    class Media:
        css = {"all": ["deadletter/admin.css"]}

    # -- permissions and lookups

    def has_restore_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(archive.RESTORE)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        """Only the list's own filters may come from the query string; anything else
        is a 400 instead of reaching the database."""
        return lookup in archive_changelist.PARAMETERS

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        allowed = super().has_delete_permission(request, obj)
        return allowed and (obj is None or scope_of(request).allows(obj.queue, "delete"))

    def get_queryset(self, request: HttpRequest) -> QuerySet[ArchivedMessage]:
        """The entries of the queues the user may view (`admin.access`)."""
        entries = ArchivedMessage.objects.using(conf.DATABASE).order_by(*self.ordering)
        scope = scope_of(request)
        return entries if scope.unrestricted else entries.filter(scope.queue_q("view"))

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return ArchiveChangeList

    def get_changelist_instance(self, request: HttpRequest) -> ChangeList:
        changelist = super().get_changelist_instance(request)
        rows.show_to([row_of(obj) for obj in changelist.result_list], request.user)
        return changelist

    def get_object(self, request: HttpRequest, object_id: str, from_field: Any = None) -> Any:
        obj = super().get_object(request, object_id, from_field)
        if obj is not None:
            rows.show_to([row_of(obj)], request.user)
        return obj

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[ArchivedMessage], search_term: str
    ) -> tuple[QuerySet[ArchivedMessage], bool]:
        return queryset, False

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [
            path(
                "<path:object_id>/restore/",
                wrap(self.restore_view),
                name="deadletter_archivedmessage_restore",
            ),
            *super().get_urls(),
        ]

    # -- pages

    @drain.outside_request_transactions
    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        live = reverse("admin:deadletter_queuedmessage_changelist")
        name = request.GET.get(archive_changelist.QueueFilter.parameter_name)
        context = {
            "live_url": f"{live}?{urlencode({'queue': name})}" if name else live,
            **(extra_context or {}),
        }
        return super().changelist_view(request, context)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> Any:
        entry = self.get_object(request, object_id)
        queue = entry.queue if entry is not None else ""
        context = {
            "has_restore_permission": self.has_restore_permission(request)
            and scope_of(request).allows(queue, archive.RESTORE_ACCESS),
            **(extra_context or {}),
        }
        return super().change_view(request, object_id, form_url, context)

    def response_action(
        self, request: HttpRequest, queryset: QuerySet[Any], *args: Any, **kwargs: Any
    ) -> Any:
        """An action on "all matching" a search is refused: the search looks through
        a window only (select the entries a page shows instead)."""
        if request.POST.get("select_across") == "1" and request.GET.get(SEARCH_VAR, "").strip():
            self.message_user(
                request,
                "An action on every archived message a search matches is not possible: the "
                "search looks through a window of the archive. Select the messages shown.",
                messages.ERROR,
            )
            return HttpResponseRedirect(request.get_full_path())
        return super().response_action(request, queryset, *args, **kwargs)

    @drain.outside_request_transactions
    def restore_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """GET: what Restore will do, and a form to confirm it; POST: restore."""
        if not self.has_restore_permission(request):
            raise PermissionDenied
        obj = self.get_object(request, object_id)
        if obj is None:
            self.message_user(
                request,
                "That archived message is no longer in the archive (restored or purged).",
                messages.WARNING,
            )
            return HttpResponseRedirect(reverse("admin:deadletter_archivedmessage_changelist"))
        if not scope_of(request).allows(obj.queue, archive.RESTORE_ACCESS):
            raise PermissionDenied
        if request.method != "POST":
            context = {
                **self.admin_site.each_context(request),
                "title": "Restore this message?",
                "opts": self.opts,
                "original": obj,
                "live": QueuedMessage.objects.using(conf.DATABASE).filter(key=obj.key).exists(),
            }
            return TemplateResponse(request, f"{TEMPLATES}/restore_confirmation.html", context)
        return self._restore_posted(request, obj)

    def _restore_posted(self, request: HttpRequest, obj: ArchivedMessage) -> HttpResponse:
        try:
            restored = archive.restore(obj.id, actor=request.user.get_username())
        except archive.ArchiveError as exc:
            self.message_user(request, str(exc), messages.WARNING)
            return HttpResponseRedirect(reverse("admin:deadletter_archivedmessage_changelist"))
        self._log_restored(request, obj, restored)
        self.message_user(
            request,
            restored_text(obj.queue, restored),
            messages.WARNING if restored.moved else messages.SUCCESS,
        )
        url = reverse("admin:deadletter_queuedmessage_change", args=[restored.key.hex()])
        return HttpResponseRedirect(url)

    def _log_restored(
        self, request: HttpRequest, obj: ArchivedMessage, restored: archive.Restored
    ) -> None:
        """A `LogEntry` on the entry and one on the live message it became."""
        moved = f" under a fresh key {restored.key.hex()}" if restored.moved else ""
        self.log_change(request, obj, f"Restored to queue {obj.queue}{moved}")
        self.log_change(
            request,
            QueuedMessage(key=HexKey(restored.key)),
            f"Restored from the archive ({obj.reason} by {obj.actor or 'nobody'}, entry {obj.id})",
        )

    # -- actions

    @admin.action(description="Restore selected archived messages", permissions=["restore"])
    def restore_selected(self, request: HttpRequest, queryset: QuerySet[ArchivedMessage]) -> None:
        """Each selected entry back in its queue (`archive.restore`, one transaction
        each) until the admin's time budget is spent; only entries of queues the user
        may retry in."""
        queryset = within(self, request, queryset, archive.RESTORE_ACCESS, chosen=posted(request))
        deadline = time.monotonic() + conf.ADMIN_TIME_BUDGET
        actor = request.user.get_username()
        done: list[str] = []
        moved: list[str] = []
        gone = 0
        left = False
        for chunk in _entry_chunks(queryset):
            for obj in chunk:
                if time.monotonic() >= deadline:
                    left = True
                    break
                try:
                    restored = archive.restore(obj.id, actor=actor)
                except archive.ArchiveError:
                    gone += 1
                    continue
                self._log_restored(request, obj, restored)
                done.append(restored.key.hex())
                if restored.moved:
                    moved.append(f"{keys.to_text(bytes(obj.key))} → {restored.key.hex()}")
            if left:
                break
        text = f"Restored {len(done)} archived message(s) to their queues."
        if moved:
            text += (
                f" {len(moved)} got a fresh key at their queue's tail, their own being taken "
                f"again: {', '.join(moved[:10])}{' …' if len(moved) > 10 else ''}."
            )
        if gone:
            text += f" {gone} were no longer in the archive."
        if left:
            text += " Stopped after the time budget: select the rest again to go on."
        level = messages.WARNING if moved or gone or left else messages.SUCCESS
        self.message_user(request, text, level)

    @admin.action(description="Delete selected archived messages for good", permissions=["delete"])
    def delete_selected(
        self, request: HttpRequest, queryset: QuerySet[ArchivedMessage]
    ) -> TemplateResponse | None:
        """Delete the selection for good after a confirmation page naming a sample,
        a chunk of ids at a time until the admin's time budget is spent; only entries
        of queues the user may delete in."""
        queryset = within(self, request, queryset, "delete", chosen=posted(request))
        if request.POST.get("post") == "yes":
            deadline = time.monotonic() + conf.ADMIN_TIME_BUDGET
            deleted, left = 0, False
            for chunk in _entry_chunks(queryset):
                if time.monotonic() >= deadline:
                    left = True
                    break
                ids = [obj.id for obj in chunk]
                entries = ArchivedMessage.objects.using(conf.DATABASE)
                self.log_deletions(request, entries.filter(id__in=ids))
                deleted += archive.delete_entries(ids)
            text = f"Deleted {deleted} archived message(s) for good."
            if left:
                text += " Stopped after the time budget: select the rest again to go on."
            self.message_user(request, text, messages.WARNING if left else messages.SUCCESS)
            return None
        across = request.POST.get("select_across") == "1"
        sample = list(queryset[: bulk.SAMPLE])
        if not sample:
            self.message_user(request, "Nothing to delete.", messages.WARNING)
            return None
        chosen = 0 if across else queryset.order_by().count()  # posted ids: a page's
        context = {
            **self.admin_site.each_context(request),
            "title": "Are you sure?",
            "opts": self.opts,
            "found": bulk.Confirmation(across, chosen, None, sample, []),
            "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "form_url": request.get_full_path(),
        }
        return TemplateResponse(request, f"{TEMPLATES}/delete_selected_confirmation.html", context)

    # -- columns

    @admin.display(description="parked")
    def parked(self, obj: ArchivedMessage) -> Any:
        when = keys.written_at(bytes(obj.key))
        return rows.render_time_seconds(when) if when is not None else keys.to_text(bytes(obj.key))

    @admin.display(description="queue")
    def queue_name(self, obj: ArchivedMessage) -> str:
        return obj.queue

    @admin.display(description="subject")
    def subject(self, obj: ArchivedMessage) -> Any:
        msgs = rows.messages_of(row_of(obj))
        if msgs is None:
            return format_html("<strong>{}</strong>", "corrupt row")
        if len(msgs) != 1:
            return f"{len(msgs)} messages"
        return rows.clipped(msgs[0].subject)

    @admin.display(description="archived")
    def archived(self, obj: ArchivedMessage) -> str:
        return rows.render_time_seconds(obj.archived_at)

    @admin.display(description="last error")
    def last_error_cut(self, obj: ArchivedMessage) -> Any:
        return rows.short_error(rows.scrubber_of(row_of(obj))(obj.last_error))

    # -- the message page

    @admin.display(description="key")
    def key_parts(self, obj: ArchivedMessage) -> SafeString:
        return rows.key_parts(bytes(obj.key))

    @admin.display(description="left its queue")
    def left(self, obj: ArchivedMessage) -> SafeString:
        """Why, by whom and when, and until when the archive keeps it."""
        kept = limits.archive_for(obj.queue)
        until = (
            "kept for ever"
            if kept is None
            else (
                f"kept until {rows.render_time_seconds(obj.archived_at + kept)} "
                f"({rows.duration(kept)} after it left)"
            )
        )
        return format_html(
            "<b>{}</b> by {}, {}; {}",
            obj.get_reason_display(),
            obj.actor or rows.EMPTY,
            rows.render_time_seconds(obj.archived_at),
            until,
        )

    @admin.display(description="last error")
    def error(self, obj: ArchivedMessage) -> Any:
        error = rows.scrubber_of(row_of(obj))(obj.last_error)
        return rows.text_html(error) if error else rows.EMPTY

    @admin.display(description="messages")
    def decoded(self, obj: ArchivedMessage) -> SafeString:
        return rows.messages_html(row_of(obj))

    @admin.display(description="attempts")
    def attempts(self, obj: ArchivedMessage) -> SafeString:
        """The key's attempt timeline: the history is kept by key, so it is the
        message's as it was when it left."""
        return timeline.timeline_html(bytes(obj.key), rows.scrubber_of(row_of(obj)))


def _entry_chunks(queryset: QuerySet[ArchivedMessage]) -> Iterator[list[ArchivedMessage]]:
    """The selected entries by id, `CHUNK` at a time, each chunk its own query."""
    ordered = queryset.order_by("id")
    last: int | None = None
    while True:
        chunk = list((ordered if last is None else ordered.filter(id__gt=last))[:CHUNK])
        if chunk:
            yield chunk
        if len(chunk) < CHUNK:
            return
        last = chunk[-1].id
