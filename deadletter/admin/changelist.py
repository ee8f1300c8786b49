"""The changelist read by key: pages by key (next / previous), never counted.

Django's paginator counts the filtered rows on every page, which at a million
rows is most of the page's cost. Here a page is `ORDER BY key LIMIT n+1`
after (or before) the key in the URL, one index range read at any size; the
queue filter is a key range and the cause filter an index range on
(signature, key), so every page stays a bounded read.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.safestring import SafeString

from deadletter.admin import table
from deadletter.models import QueuedMessage
from deadletter.queue import queue_names
from deadletter.reports import overview
from deadletter.wire import keys

AFTER = "after"
MAX_CAUSES_LISTED = 20
BEFORE = "before"


class QueueFilter(admin.SimpleListFilter):
    """Filter by queue: a key range, so it stays an index range read at any table size."""

    title = "queue"
    parameter_name = "queue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in queue_names()]

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


class CauseFilter(admin.SimpleListFilter):
    """Filter by failure cause (the stored signature): an index range on (signature, key)."""

    title = "failure cause"
    parameter_name = "cause"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        """The first signatures alphabetically (the overview counts them per queue);
        one seek each, never a count."""
        listed = overview.signatures(MAX_CAUSES_LISTED)
        chosen = self.value()
        if chosen and chosen not in listed:
            listed.append(chosen)
        return [(sig, sig) for sig in listed]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[QueuedMessage]
    ) -> QuerySet[QueuedMessage]:
        cause = self.value()
        return queryset.filter(signature=cause) if cause else queryset


def _key_param(request: HttpRequest, name: str) -> bytes | None:
    text = request.GET.get(name)
    if text is None:
        return None
    try:
        return keys.from_text(text)
    except ValueError:
        raise IncorrectLookupParameters(f"{name} is not a key in hex") from None


class KeysetChangeList(ChangeList):
    """A changelist whose pages are key ranges: `?after=<hex>` / `?before=<hex>`."""

    def __init__(self, request: HttpRequest, *args: Any, **kwargs: Any) -> None:
        self.after_key = _key_param(request, AFTER)
        self.before_key = _key_param(request, BEFORE)
        self.next_url: str | None = None
        self.previous_url: str | None = None
        super().__init__(request, *args, **kwargs)

    def get_filters_params(self, params: Any = None) -> Any:
        lookup_params = super().get_filters_params(params)
        for name in (AFTER, BEFORE):
            lookup_params.pop(name, None)
        return lookup_params

    def get_results(self, request: HttpRequest) -> None:
        size = self.list_per_page
        queryset = self.queryset
        if self.before_key is not None:
            rows = list(queryset.filter(key__lt=self.before_key).order_by("-key")[: size + 1])
            has_previous, has_next = len(rows) > size, True
            rows = rows[:size][::-1]
        else:
            if self.after_key is not None:
                queryset = queryset.filter(key__gt=self.after_key)
            rows = list(queryset[: size + 1])
            has_previous, has_next = self.after_key is not None, len(rows) > size
            rows = rows[:size]
        if rows and has_next:
            self.next_url = self.get_query_string({AFTER: rows[-1].key_hex}, [BEFORE, "p"])
        if rows and has_previous:
            self.previous_url = self.get_query_string({BEFORE: rows[0].key_hex}, [AFTER, "p"])
        self.result_count = len(rows)
        self.show_full_result_count = False
        self.show_admin_actions = True
        self.full_result_count = None
        self.result_list = rows
        self.can_show_all = False
        self.multi_page = has_next or has_previous
        self.paginator = None

    def results_table(self) -> SafeString:
        """The rows' table, rendered in one pass (`table.render`)."""
        return table.render(self)
