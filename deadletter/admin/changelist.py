"""The changelist read by key: pages by key (next / previous), never counted.

Django's paginator counts the filtered rows on every page, which at a million
rows is most of the page's cost. Here a page is `ORDER BY key LIMIT n+1`
after (or before) the key in the URL, one index range read at any size; the
queue filter is a key range and the cause filter an index range on
(signature, key), so every page stays a bounded read. The rows' table is
Django's own (`{% result_list %}`), whose markup the admin's JavaScript and
CSS are written against; each row is decoded once for all its columns
(`rows.messages_of`).
"""

from __future__ import annotations

from collections.abc import Iterator, Reversible
from typing import Any, TypedDict

from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext

from deadletter.admin import searching
from deadletter.models import QueuedMessage
from deadletter.queue import access, incidents, redaction, search
from deadletter.reports import overview, queues
from deadletter.wire import keys

AFTER = "after"
MAX_CAUSES_LISTED = 20
# Causes' rows read at most for a restricted user's cause filter.
CAUSES_READ = 10_000
# Queues the queue filter lists by name (one index seek each); any other is typed.
MAX_QUEUES_LISTED = 50
BEFORE = "before"


class Choice(TypedDict):
    """One choice of a list filter, as Django's filter templates read it."""

    selected: bool
    query_string: str
    display: Any  # a str or a lazy translation


class QueueFilter(admin.SimpleListFilter):
    """Filter by queue: a key range, so it stays an index range read at any table size.

    It lists the first `MAX_QUEUES_LISTED` queues by name (one walk statement),
    and when there are more says so and takes a typed name: clients can make
    100,000 queues. `?queue=<name>` selects any queue, listed or not."""

    title = "queue"
    parameter_name = "queue"
    template = "admin/deadletter/queuedmessage/queue_filter.html"
    listed = MAX_QUEUES_LISTED

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        scope = access.scope_of(request.user)
        if scope.unrestricted:
            page = queues.page_after(None, self.listed)
            self.more = page.more_after
            listed = page.names
        else:
            names = scope.granted_names(self.listed + 1)
            self.more = len(names) > self.listed
            listed = names[: self.listed]
        chosen = self.value()
        if chosen and chosen not in listed:
            listed.append(chosen)
        return [(name, name) for name in listed]

    def choices(self, changelist: ChangeList) -> Iterator[Choice]:
        """Django's choices (never with facet counts), each leading to the first page
        of its queue: a key page of one queue means nothing in another."""
        self.kept = [
            (name, value)
            for name, value in changelist.params.items()
            if name not in (self.parameter_name, AFTER, BEFORE)
        ]
        paging = [AFTER, BEFORE]
        yield {
            "selected": self.value() is None,
            "query_string": changelist.get_query_string(remove=[self.parameter_name, *paging]),
            "display": gettext("All"),
        }
        for lookup, title in self.lookup_choices:
            yield {
                "selected": self.value() == lookup,
                "query_string": changelist.get_query_string({self.parameter_name: lookup}, paging),
                "display": title,
            }

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
        if not access.scope_of(request.user).allows(name):
            return queryset.none()  # not a scan of its rows, each refused by the scope
        return queryset.filter(key__gte=low, key__lt=high)


class CauseFilter(admin.SimpleListFilter):
    """Filter by failure cause (the stored signature): an index range on (signature, key)."""

    title = "failure cause"
    parameter_name = "cause"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        """The first signatures alphabetically (the overview counts them per queue);
        one seek each, never a count. A user kept to some queues (`queue.access`) is
        offered the causes of those queues only (read off the causes' small table)."""
        scope = access.scope_of(request.user)
        if scope.unrestricted:
            listed = overview.signatures(MAX_CAUSES_LISTED)
        else:
            listed = granted_signatures(scope, MAX_CAUSES_LISTED)
        chosen = self.value()
        if chosen and chosen not in listed:
            listed.append(chosen)
        return [(sig, sig) for sig in listed]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[QueuedMessage]
    ) -> QuerySet[QueuedMessage]:
        cause = self.value()
        return queryset.filter(signature=cause) if cause else queryset


def granted_signatures(scope: access.Scope, limit: int) -> list[str]:
    """The first `limit` signatures, alphabetically, of the causes of the queues
    `scope` may view: from the causes' table (one row per queue and signature),
    at most `CAUSES_READ` of its rows."""
    rows = incidents.causes().order_by("signature", "queue").values_list("queue", "signature")
    found: list[str] = []
    for queue, signature in rows[:CAUSES_READ].iterator():
        if scope.allows(queue) and (not found or found[-1] != signature):
            found.append(signature)
            if len(found) == limit:
                break
    return found


def by_span(
    queryset: QuerySet[QueuedMessage],
    spans: Reversible[tuple[bytes, bytes | None]] | None,
    limit: int,
    *,
    after: bytes | None = None,
    before: bytes | None = None,
) -> list[QueuedMessage]:
    """Up to `limit` rows after `after` in key order (with `before`: before it,
    nearest first). With `spans` (a restricted user's key ranges, `queue.access`)
    one range at a time: each read is then one index range, where the scope's OR
    of ranges alone would have the database sort every granted row for the page."""
    if before is not None:
        ordered = queryset.filter(key__lt=before).order_by("-key")
    else:
        ordered = queryset if after is None else queryset.filter(key__gt=after)
    if spans is None:
        return list(ordered[:limit])
    rows: list[QueuedMessage] = []
    for low, high in reversed(spans) if before is not None else spans:
        if (before is not None and low >= before) or (
            after is not None and high is not None and high <= after
        ):
            continue
        part = ordered.filter(key__gte=low)
        if high is not None:
            part = part.filter(key__lt=high)
        rows.extend(part[: limit - len(rows)])
        if len(rows) >= limit:
            break
    return rows


def _key_param(request: HttpRequest, name: str) -> bytes | None:
    text = request.GET.get(name)
    if text is None:
        return None
    try:
        return keys.from_text(text)
    except ValueError:
        raise IncorrectLookupParameters(f"{name} is not a key in hex") from None


class KeysetChangeList(ChangeList):
    """A changelist whose pages are key ranges: `?after=<hex>` / `?before=<hex>`.

    With a search (`?q=`) a page is the next matches in key order from the same
    cursor (`search.keys_page`, in a restricted user's granted ranges only): still
    never counted. A malformed search is one error message above an empty list."""

    def __init__(self, request: HttpRequest, *args: Any, **kwargs: Any) -> None:
        self.after_key = _key_param(request, AFTER)
        self.before_key = _key_param(request, BEFORE)
        # One queue's page is its one key range (the scope judged the queue whole).
        chosen = request.GET.get(QueueFilter.parameter_name)
        scope = access.scope_of(request.user)
        self.spans = None if chosen else scope.spans(after=self.after_key, before=self.before_key)
        self.next_url: str | None = None
        self.previous_url: str | None = None
        self.search_query: search.Query | None = None
        self.search_error: str | None = None
        try:
            self.search_query = searching.query_of(request, request.GET.get("cause"))
        except search.SearchError as exc:
            self.search_error = str(exc)
            messages.error(request, f"Search: {exc}")
        super().__init__(request, *args, **kwargs)

    def get_filters_params(self, params: Any = None) -> Any:
        lookup_params = super().get_filters_params(params)
        for name in (AFTER, BEFORE):
            lookup_params.pop(name, None)
        return lookup_params

    def get_results(self, request: HttpRequest) -> None:
        size = self.list_per_page
        queryset = self.queryset
        if self.search_error is not None:
            rows: list[QueuedMessage] = []
            has_previous = has_next = False
        elif self.query.strip() and self.search_query is not None:
            try:
                found, more = search.keys_page(
                    self.search_query,
                    queue=request.GET.get(QueueFilter.parameter_name) or None,
                    after_key=self.after_key,
                    before_key=self.before_key,
                    size=size,
                    reveal=redaction.reveals(request.user),
                    spans=self.spans,
                )
            except search.SearchTooCostly as exc:
                messages.error(request, f"Search: {exc}")
                found, more = [], False
            except ValueError:  # no such queue name: the queue filter shows none either
                found, more = [], False
            rows = list(queryset.filter(key__in=found).order_by("key"))
            backwards = self.before_key is not None and self.after_key is None
            has_previous = more if backwards else self.after_key is not None
            has_next = True if backwards else more
        elif self.before_key is not None:
            rows = by_span(queryset, self.spans, size + 1, before=self.before_key)
            has_previous, has_next = len(rows) > size, True
            rows = rows[:size][::-1]
        else:
            rows = by_span(queryset, self.spans, size + 1, after=self.after_key)
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
        self.found_text = found_text(len(rows), has_next=has_next, has_previous=has_previous)


def found_text(shown: int, *, has_next: bool, has_previous: bool) -> str:
    """What a filtered or searched page says it found: only what it counted. Pages are
    never counted, so "more than N" when another page follows, "N on this page" after
    earlier pages, the exact figure when the page holds every match."""
    noun = f"result{'s' if shown != 1 else ''}"
    if has_next:
        return f"more than {shown:,} {noun}"
    if has_previous:
        return f"{shown:,} {noun} on this page"
    return f"{shown:,} {noun}"
