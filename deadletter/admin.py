"""The Django admin over the queue: read-only rows, decoded in place.

Rows are listed in key order (a queue, oldest first) straight off the
primary-key index; the key travels in URLs as hex (`keys.to_text`).
Deleting goes through `queue.dequeue`, so signals and logs match the drain.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import quote
from django.contrib.admin.views.main import ChangeList
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from deadletter import codec, drain, keys, queue
from deadletter.conf import conf
from deadletter.messages import Message
from deadletter.models import QueuedMessage


class HexKeyQuerySet(QuerySet[QueuedMessage]):
    """Reads the hex keys the admin's action checkboxes post (`pk__in`)."""

    def filter(self, *args: Any, **kwargs: Any) -> Any:
        selected = kwargs.get("pk__in")
        if selected is not None and not isinstance(selected, QuerySet):
            wanted = []
            for value in selected:
                try:
                    wanted.append(keys.from_text(value) if isinstance(value, str) else value)
                except ValueError:
                    continue
            kwargs["pk__in"] = wanted
        return super().filter(*args, **kwargs)


class KeyChangeList(ChangeList):
    def url_for_result(self, result: Model) -> str:
        return reverse(
            f"admin:{self.opts.app_label}_{self.opts.model_name}_change",
            args=(quote(keys.to_text(bytes(result.pk))),),
            current_app=self.model_admin.admin_site.name,
        )


def _messages(obj: QueuedMessage) -> list[Message] | None:
    """The row's messages, decoded once per request; None for a corrupt row."""
    if not hasattr(obj, "_decoded"):
        try:
            decoded: list[Message] | None = codec.decode(bytes(obj.value))
        except codec.CodecError:
            decoded = None
        obj._decoded = decoded  # type: ignore[attr-defined]
    return obj._decoded  # type: ignore[attr-defined]


def _first(obj: QueuedMessage) -> Message | None:
    msgs = _messages(obj)
    return msgs[0] if msgs else None


class QueueFilter(admin.SimpleListFilter):
    """Filter by queue: a key range, so it stays an index range read at any table size."""

    title = "queue"
    parameter_name = "queue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in queue.queue_names()]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[QueuedMessage]
    ) -> QuerySet[QueuedMessage]:
        name = self.value()
        if not name:
            return queryset
        try:
            low, high = keys.queue_bounds(name)
        except ValueError:
            return queryset.none()
        return queryset.filter(key__gte=low, key__lt=high)


@admin.register(QueuedMessage)
class QueuedMessageAdmin(admin.ModelAdmin):
    list_display = ["enqueued", "queue_name", "subject", "username", "code", "queued_at", "note"]
    list_display_links = ["enqueued"]
    list_filter = [QueueFilter]
    ordering = ["key"]
    list_per_page = 50
    show_full_result_count = False
    fields = ("key_text", "queue_name", "enqueued", "decoded")
    readonly_fields = fields
    actions = ["retry_now"]

    def has_drain_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("deadletter.drain_queuedmessage")

    @admin.action(description="Retry selected messages now", permissions=["drain"])
    def retry_now(self, request: HttpRequest, queryset: QuerySet[QueuedMessage]) -> None:
        """Hand the selected rows to their handlers with a drain's rules (at least
        once; a drain running on the same SQLite queue makes this refuse)."""
        selected = [bytes(k) for k in queryset.values_list("key", flat=True)]
        try:
            report = drain.redeliver(selected)
        except (drain.DrainConfigError, drain.DrainLocked) as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return
        dropped = sum(report.dropped.values())
        level = messages.WARNING if report.failed or report.errors else messages.SUCCESS
        self.message_user(
            request,
            f"Retried {report.handled} message(s): {report.delivered} delivered, "
            f"{report.requeued} partly delivered, {report.failed} still failing, "
            f"{dropped} dropped.",
            level,
        )

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return KeyChangeList

    def get_queryset(self, request: HttpRequest) -> QuerySet[QueuedMessage]:
        queryset = HexKeyQuerySet(model=QueuedMessage, using=conf.DATABASE)
        return queryset.order_by(*self.get_ordering(request))

    def action_checkbox(self, obj: QueuedMessage) -> SafeString:
        checkbox = forms.CheckboxInput({"class": "action-select"}, lambda value: False)
        return checkbox.render(helpers.ACTION_CHECKBOX_NAME, keys.to_text(obj.key_bytes))

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> QueuedMessage | None:
        try:
            key = keys.from_text(object_id)
        except ValueError:
            return None
        return self.get_queryset(request).filter(key=key).first()

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def delete_model(self, request: HttpRequest, obj: QueuedMessage) -> None:
        queue.dequeue(obj.key_bytes)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[QueuedMessage]) -> None:
        for key in queryset.values_list("key", flat=True).iterator(chunk_size=1000):
            queue.dequeue(bytes(key))

    @admin.display(description="key")
    def key_text(self, obj: QueuedMessage) -> str:
        return keys.to_text(obj.key_bytes)

    @admin.display(description="queue")
    def queue_name(self, obj: QueuedMessage) -> str:
        return obj.queue

    @admin.display(description="enqueued", ordering="key")
    def enqueued(self, obj: QueuedMessage) -> Any:
        return obj.enqueued_at or "legacy aggregate row"

    @admin.display(description="subject")
    def subject(self, obj: QueuedMessage) -> str:
        msg = _first(obj)
        return msg.subject if msg else ""

    @admin.display(description="username")
    def username(self, obj: QueuedMessage) -> str:
        msg = _first(obj)
        return msg.username if msg else ""

    @admin.display(description="code")
    def code(self, obj: QueuedMessage) -> str:
        msg = _first(obj)
        return getattr(msg.code, "name", str(msg.code)) if msg else ""

    @admin.display(description="first failure")
    def queued_at(self, obj: QueuedMessage) -> str:
        msg = _first(obj)
        return str(msg.queued_at) if msg and msg.queued_at else ""

    @admin.display(description="note")
    def note(self, obj: QueuedMessage) -> str:
        msgs = _messages(obj)
        if msgs is None:
            return format_html("<strong>{}</strong>", "corrupt: dropped at next fetch")
        if obj.is_legacy or len(msgs) != 1:
            return f"{len(msgs)} messages: split at next fetch"
        attempts = msgs[0].extra.get("Attempts")
        error = str(msgs[0].extra.get("LastError", ""))
        return f"{attempts} attempts: {error}" if attempts else error

    @admin.display(description="messages")
    def decoded(self, obj: QueuedMessage) -> str:
        msgs = _messages(obj)
        if msgs is None:
            return "corrupt row: it does not decode"
        return format_html("<pre>{}</pre>", "\n\n".join(_describe(m) for m in msgs) or "(empty)")


def _describe(msg: Message) -> str:
    lines = [
        f"subject: {msg.subject}",
        f"username: {msg.username}",
        f"code: {getattr(msg.code, 'name', msg.code)}",
        f"timestamp: {msg.timestamp}",
        f"queued_at: {msg.queued_at}",
        f"descriptions: {msg.descriptions}",
        f"fields: {msg.fields}",
        f"skip_recipients: {msg.skip_recipients}",
    ]
    lines += [f"{name}: {value!r}" for name, value in msg.extra.items()]
    return "\n".join(lines)
