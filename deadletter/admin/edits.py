"""The message page's "Edit": a form built from the decoded message, saved through
`queue.edits.edit_msg` (one transaction, the original archived as `edited`),
logged with each changed field in the message's History, and on "Save and retry
now" handed to its handler once.

Allowed to holders of `deadletter.change_queuedmessage` on a queue whose policy
says `"editable": True`. What no edit changes (the first failure, the drain's
attempt count and last error, an integration's sealed keys) is shown read-only
with why. A field whose text comes back as it was shown keeps its stored value
exactly (Go's nil list, a float's width, a time's offset).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.admin import ModelAdmin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from deadletter.conf import conf
from deadletter.drain import inflight
from deadletter.models import QueuedMessage
from deadletter.queue import browse, edits, limits, redaction
from deadletter.wire import jsonvalues, keys
from deadletter.wire.gotime import GoOnlyTime, GoTime
from deadletter.wire.messages import Message

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
LIST_FIELDS = (
    ("descriptions", "descriptions"),
    ("fields", "fields"),
    ("skip_recipients", "skip recipients"),
)
_LINE_BREAK = re.compile(r"\r\n|\n|\r")


def can_edit(request: HttpRequest, key: bytes) -> bool:
    """Whether the user may edit the row `key`: the change permission, on an editable queue."""
    return (
        not keys.is_legacy_key(key)
        and bool(request.user.has_perm(edits.PERMISSION))
        and edits.queue_refusal(keys.queue_of(key)) is None
    )


def can_edit_text(request: HttpRequest, object_id: str) -> bool:
    """`can_edit` for a key as the URL carries it (False for one that is not a key)."""
    try:
        return can_edit(request, keys.from_text(unquote(object_id)))
    except ValueError:
        return False


def _text(value: str, keep_crlf: bool) -> str:
    """What a textarea posted, its line breaks as they were: a browser sends CRLF."""
    return value if keep_crlf else value.replace("\r\n", "\n")


class ExactTextField(forms.CharField):
    """Text kept as typed (no strip); a textarea when the value holds a line break,
    which a one-line input would lose."""

    def __init__(self, *, initial: str, **kwargs: Any) -> None:
        multiline = "\n" in initial or "\r" in initial
        widget = (
            forms.Textarea(attrs={"rows": 3}) if multiline else forms.TextInput(attrs={"size": 80})
        )
        super().__init__(required=False, strip=False, initial=initial, widget=widget, **kwargs)
        self.keep_crlf = "\r\n" in initial

    def clean(self, value: Any) -> str:
        return _text(str(super().clean(value) or ""), self.keep_crlf)


class ListField(forms.CharField):
    """A list of texts, one a line; as a JSON array when an item holds a line break
    or is empty (a line cannot show it). Empty: no list (Go's nil)."""

    def __init__(self, *, value: list[str] | None, **kwargs: Any) -> None:
        items = value or []
        self.as_json = any(item == "" or _LINE_BREAK.search(item) for item in items)
        if self.as_json:
            initial = json.dumps(items, ensure_ascii=False)
            help_text = "A JSON array of strings: an item holds a line break or is empty."
        else:
            initial = "\n".join(items)
            help_text = "One a line; empty for none."
        super().__init__(
            required=False,
            strip=False,
            initial=initial,
            help_text=help_text,
            widget=forms.Textarea(attrs={"rows": max(2, min(len(items) + 1, 10))}),
            **kwargs,
        )

    def to_list(self, text: str) -> list[str] | None:
        if self.as_json:
            parsed = _json(text)
            if not isinstance(parsed, list) or not all(isinstance(i, str) for i in parsed):
                raise forms.ValidationError("Expected a JSON array of strings.")
            return parsed
        if text == "":
            return None
        lines = _LINE_BREAK.split(text)
        return lines[:-1] if lines[-1] == "" else lines


def _json(text: str) -> Any:
    try:
        return json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise forms.ValidationError(f"Not JSON: {exc}") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f'{name} is not JSON (write {{"$float": "{name}"}})')


def time_text(value: Any) -> str:
    return value.format() if isinstance(value, GoTime | GoOnlyTime) else ""


def json_text(value: Any) -> str:
    return json.dumps(jsonvalues.to_json(value), ensure_ascii=False)


REDACTED_HELP = (
    "Not editable: redacted (DEADLETTER_REDACT), and you may not see its value "
    "(the view_unredacted_queuedmessage permission)."
)


class EditForm(forms.Form):
    """The fields of one message; `message()` is the edited message (valid forms only).
    A field `shown` masks (`queue.redaction`) shows masked and read-only: a user
    who may not see a value may not overwrite it either."""

    etag = forms.CharField(widget=forms.HiddenInput)

    def __init__(
        self, data: Any = None, *, msg: Message, etag: str, shown: Message | None = None
    ) -> None:
        super().__init__(data, initial={"etag": etag})
        self.original = msg
        self.redacted: set[str] = set()
        fields = self.fields
        fields["subject"] = ExactTextField(initial=msg.subject)
        fields["username"] = ExactTextField(initial=msg.username, label="Recipient (username)")
        names = ", ".join(
            f"{code} {name}" for code in range(0, 10) if (name := browse.code_name(code))
        )
        fields["code"] = forms.IntegerField(
            initial=int(msg.code),
            min_value=INT64_MIN,
            max_value=INT64_MAX,
            help_text=f"The event code, a 64-bit integer{f' ({names}, …)' if names else ''}.",
        )
        fields["timestamp"] = forms.CharField(
            required=False,
            initial=time_text(msg.timestamp),
            help_text="RFC 3339, up to nine fraction digits (2026-11-29T12:00:00.5Z); "
            "empty for Go's zero time.",
            widget=forms.TextInput(attrs={"size": 40}),
        )
        fields["queued_at"] = forms.CharField(
            required=False,
            disabled=True,
            initial=time_text(msg.queued_at),
            label="First failure (queued at)",
            help_text="Not editable: it anchors the age limit.",
        )
        for name, label in LIST_FIELDS:
            fields[name] = ListField(value=getattr(msg, name), label=label.capitalize())
        fixed = edits.fixed_keys()
        self.extra_names: list[tuple[str, str]] = []
        for index, (name, value) in enumerate(msg.extra.items()):
            field_name = f"extra_{index}"
            self.extra_names.append((field_name, name))
            why = fixed.get(name)
            fields[field_name] = forms.CharField(
                required=False,
                strip=False,
                disabled=why is not None,
                initial=json_text(value),
                label=name,
                help_text=f"Not editable: {why}."
                if why
                else "A JSON value (bytes, big numbers and others in the API's $ form); "
                "empty removes the key.",
                widget=forms.Textarea(attrs={"rows": 2}),
            )

        if shown is not None and shown is not msg:
            self._mask(shown)

    def _mask(self, shown: Message) -> None:
        """Each field `shown` masks (`edits.masked_fields`): the mask as its value, read-only."""
        form_names = {f"extra.{key}": field_name for field_name, key in self.extra_names}
        for name in edits.masked_fields(self.original, shown):
            field_name = form_names.get(name, name)
            key = name.removeprefix("extra.")
            value = shown.extra[key] if name in form_names else getattr(shown, name)
            field = self.fields[field_name]
            field.disabled = True
            field.help_text = REDACTED_HELP
            field.widget.attrs["data-redacted"] = "1"
            field.initial = value if name in ("subject", "username") else json_text(value)
            self.redacted.add(field_name)

    def fixed_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.fields if self.fields[name].disabled]

    def clean_timestamp(self) -> Any:
        text = self.cleaned_data["timestamp"]
        if text == time_text(self.original.timestamp):
            return self.original.timestamp
        if text.strip() == "":
            return None
        try:
            return GoTime.parse(text.strip())
        except (ValueError, OverflowError) as exc:
            raise forms.ValidationError(f"Not an RFC 3339 time: {exc}") from None

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        msg = self.original
        for name, _ in LIST_FIELDS:
            if name not in cleaned:
                continue
            field: Any = self.fields[name]
            text = _text(cleaned[name], False)
            if text == field.initial or name in self.redacted:
                cleaned[name] = getattr(msg, name)
                continue
            try:
                cleaned[name] = field.to_list(text)
            except forms.ValidationError as exc:
                self.add_error(name, exc)
        extra: dict[str, Any] = {}
        for field_name, key in self.extra_names:
            field = self.fields[field_name]
            text = _text(cleaned.get(field_name) or "", False)
            if field.disabled or text == field.initial:
                extra[key] = msg.extra[key]
                continue
            if text == "":
                continue
            try:
                extra[key] = jsonvalues.from_json(_json(text))
            except forms.ValidationError as exc:
                self.add_error(field_name, exc)
            except ValueError as exc:
                self.add_error(field_name, str(exc))
        cleaned["extra"] = extra
        return cleaned

    def message(self) -> Message:
        data = self.cleaned_data
        msg = self.original
        return msg.replace(
            subject=msg.subject if "subject" in self.redacted else data["subject"],
            username=msg.username if "username" in self.redacted else data["username"],
            code=data["code"],
            timestamp=data["timestamp"],
            descriptions=data["descriptions"],
            fields=data["fields"],
            skip_recipients=data["skip_recipients"],
            extra=data["extra"],
        )

    def refused(self, exc: edits.EditRefused) -> None:
        """The refusal as a form error, on its field when it names one shown."""
        field = exc.field
        for field_name, key in self.extra_names:
            if field == f"extra.{key}":
                field = field_name
        self.add_error(field if field in self.fields else None, str(exc))


def edit_page(
    model_admin: ModelAdmin[QueuedMessage],
    request: HttpRequest,
    object_id: str,
    retry: Callable[[HttpRequest, bytes], None],
    may_retry: bool,
) -> HttpResponse:
    """GET: the form. POST: save (`_save`), or save and retry now (`_retry`, which
    also needs the drain permission, `may_retry`): `retry(request, key)` hands it over. A save
    the row's changes refuse opens the form again on the row as it is now."""
    obj: QueuedMessage | None = model_admin.get_object(request, unquote(object_id))
    if obj is None:
        model_admin.message_user(
            request,
            "The message is no longer parked (delivered, deleted or dropped): nothing to edit.",
            messages.WARNING,
        )
        return HttpResponseRedirect(_changelist(model_admin))
    key = obj.key_bytes
    if not can_edit(request, key):
        raise PermissionDenied
    change_url = reverse(
        f"{model_admin.admin_site.name}:deadletter_queuedmessage_change", args=[obj.key_hex]
    )
    value = bytes(obj.value or b"")
    etag = edits.etag_of(key, value)
    try:
        msg = edits.editable_message(value)
    except edits.EditRefused as exc:
        model_admin.message_user(request, f"This message cannot be edited: {exc}", messages.ERROR)
        return HttpResponseRedirect(change_url)
    retrying = "_retry" in request.POST
    if retrying and not may_retry:
        raise PermissionDenied
    shown = redaction.redacted(msg, keys.queue_of(key), reveal=redaction.reveals(request.user))
    form = EditForm(request.POST or None, msg=msg, etag=etag, shown=shown)
    if request.method == "POST":
        posted = str(request.POST.get("etag", ""))
        if not edits.etag_matches(key, value, posted):
            model_admin.message_user(
                request,
                "The message changed since the form was opened (another edit, a retry or a "
                "drain came first); nothing was saved. Here it is as it is now.",
                messages.ERROR,
            )
            form = EditForm(msg=msg, etag=etag, shown=shown)
        elif form.is_valid():
            try:
                saved = _save(model_admin, request, key, form, posted)
            except edits.EditConflict as exc:  # since the check above: the form anew
                model_admin.message_user(request, f"Not saved: {exc}.", messages.ERROR)
                return HttpResponseRedirect(request.get_full_path())
            if saved is not None:
                if retrying:
                    retry(request, key)
                found = QueuedMessage.objects.using(conf.DATABASE).filter(key=key).exists()
                return HttpResponseRedirect(change_url if found else _changelist(model_admin))
    context = {
        **model_admin.admin_site.each_context(request),
        "title": f"Edit {obj}",
        "opts": model_admin.opts,
        "original": obj,
        "form": form,
        "change_url": change_url,
        "has_drain_permission": may_retry,
        "archive_on": _archive_on(keys.queue_of(key)),
    }
    return TemplateResponse(request, "admin/deadletter/queuedmessage/edit_form.html", context)


def _save(
    model_admin: ModelAdmin[QueuedMessage],
    request: HttpRequest,
    key: bytes,
    form: EditForm,
    etag: str,
) -> edits.Edited | None:
    try:
        edited = edits.edit_msg(
            key,
            form.message(),
            expected=etag,
            actor=request.user.get_username(),
            held=inflight.in_hand,
            user=request.user,
        )
    except edits.EditRefused as exc:
        form.refused(exc)
        return None
    if not edited.changes:
        model_admin.message_user(request, "Nothing changed; nothing was saved.", messages.INFO)
        return edited
    names = ", ".join(change.name for change in edited.changes)
    kept = (
        " The original is in the archive as edited."
        if _archive_on(keys.queue_of(key))
        else " The archive of this queue is off: the History keeps what changed."
    )
    model_admin.message_user(request, f"Saved: {names} changed.{kept}", messages.SUCCESS)
    return edited


def _archive_on(queue: str) -> bool:
    return limits.archive_for(queue) != limits.ARCHIVE_OFF


def _changelist(model_admin: ModelAdmin[QueuedMessage]) -> str:
    return reverse(f"{model_admin.admin_site.name}:deadletter_queuedmessage_changelist")
