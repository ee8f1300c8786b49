"""Archived messages' change list: newest first, a page at a time from a cursor
(`queue.archive_pages`), never counted, whatever the archive holds.

Its filters lead to the first page (a cursor of one filter means nothing in
another). The queue filter is an index range; it lists the archive's queues (one seek
each) up to the live list's number, then takes a typed name. The reason and actor filters and
the search look through a bounded window of entries a page (`archive_pages.WINDOW`),
and the page says how far it looked when it stopped there. A user kept to some
queues (`queue.access`) sees their entries only, and only those in the filter
(the first `access.RESOLVE_LIMIT` of the archive's queue names are looked at).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import SEARCH_VAR, ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext

from deadletter.admin.changelist import MAX_QUEUES_LISTED, Choice
from deadletter.models import ArchivedMessage
from deadletter.queue import access, archive_pages, search
from deadletter.queue.archive_retention import archived_queues
from deadletter.queue.redaction import reveals
from deadletter.queue.search import qualifiers

CURSOR = "cursor"

SEARCH_HELP = (
    f"The live list's search ({qualifiers.summary()}), checked on each archived message: "
    f"the archive has no search index, so a page looks through {archive_pages.WINDOW:,} "
    "archived messages at most, newest first, and next › goes on from where it stopped."
)


class TypedFilter(admin.SimpleListFilter):
    """A list filter on one column whose choices lead to the first page, with a
    form to type a value its list does not hold when `typed`."""

    template = "admin/deadletter/archivedmessage/typed_filter.html"
    parameter_name = ""
    field = ""
    typed = True
    help = ""

    def choices(self, changelist: ChangeList) -> Iterator[Choice]:
        self.kept = [
            (name, value)
            for name, value in changelist.params.items()
            if name not in (self.parameter_name, CURSOR)
        ]
        yield {
            "selected": self.value() is None,
            "query_string": changelist.get_query_string(remove=[self.parameter_name, CURSOR]),
            "display": gettext("All"),
        }
        for lookup, title in self.lookup_choices:
            yield {
                "selected": self.value() == lookup,
                "query_string": changelist.get_query_string(
                    {self.parameter_name: lookup}, [CURSOR]
                ),
                "display": title,
            }

    def with_chosen(self, listed: list[tuple[str, str]]) -> list[tuple[str, str]]:
        chosen = self.value()
        if chosen and chosen not in {value for value, _ in listed}:
            listed.append((chosen, chosen))
        return listed

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[ArchivedMessage]
    ) -> QuerySet[ArchivedMessage]:
        value = self.value()
        if value and "\x00" in value:
            return queryset.none()
        return queryset.filter(**{self.field: value}) if value else queryset


class QueueFilter(TypedFilter):
    """The queues with archive entries, the first `MAX_QUEUES_LISTED` by name (one
    index seek each, `archived_queues`); past them a typed name."""

    title = "queue"
    parameter_name = "queue"
    field = "queue"
    help = f"More queues than the first {MAX_QUEUES_LISTED} listed by name: type one."

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        scope = access.scope_of(request.user)
        walked: Iterator[str] = archived_queues()
        if not scope.unrestricted:
            granted = itertools.islice(walked, access.RESOLVE_LIMIT)
            walked = (name for name in granted if scope.allows(name))
        names = list(itertools.islice(walked, MAX_QUEUES_LISTED + 1))
        self.typed = len(names) > MAX_QUEUES_LISTED
        return self.with_chosen([(name, name) for name in names[:MAX_QUEUES_LISTED]])


class ReasonFilter(TypedFilter):
    title = "reason"
    parameter_name = "reason"
    field = "reason"
    typed = False

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(str(value), str(label)) for value, label in ArchivedMessage.Reason.choices]


class ActorFilter(TypedFilter):
    title = "who"
    parameter_name = "actor"
    field = "actor"
    help = "A user name, or drain."

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        listed = [("drain", "drain (its rules)")]
        name = request.user.get_username()
        if name and name != "drain":
            listed.append((name, f"{name} (you)"))
        return self.with_chosen(listed)


FILTERS = (QueueFilter, ReasonFilter, ActorFilter)
PARAMETERS = frozenset(spec.parameter_name for spec in FILTERS)


def filters_of(request: HttpRequest) -> archive_pages.Filters:
    """What the request's filters and search (`?q=`) ask for, within the queues the
    user may view; `search.SearchError` for a malformed search."""
    text = request.GET.get(SEARCH_VAR, "").strip()
    return archive_pages.Filters(
        within=access.scope_of(request.user),
        queue=request.GET.get(QueueFilter.parameter_name) or None,
        reason=request.GET.get(ReasonFilter.parameter_name) or None,
        actor=request.GET.get(ActorFilter.parameter_name) or None,
        query=search.parse(text) if text else None,
        reveal=reveals(request.user),
    )


class ArchiveChangeList(ChangeList):
    """A change list whose pages start at `?cursor=` (`archive_pages.Cursor`)."""

    def __init__(self, request: HttpRequest, *args: Any, **kwargs: Any) -> None:
        text = request.GET.get(CURSOR)
        try:
            self.cursor = archive_pages.Cursor.parse(text) if text is not None else None
        except ValueError as exc:
            raise IncorrectLookupParameters(str(exc)) from None
        self.next_url: str | None = None
        self.newest_url: str | None = None
        self.looked_note: str | None = None
        self.filters: archive_pages.Filters | None = None
        try:
            self.filters = filters_of(request)
        except search.SearchError as exc:
            messages.error(request, f"Search: {exc}")
        super().__init__(request, *args, **kwargs)

    def get_filters_params(self, params: Any = None) -> Any:
        lookup_params = super().get_filters_params(params)
        lookup_params.pop(CURSOR, None)
        return lookup_params

    def get_results(self, request: HttpRequest) -> None:
        entries: list[ArchivedMessage] = []
        if self.filters is not None:
            found = archive_pages.page(self.filters, self.cursor, self.list_per_page)
            entries = found.entries
            if found.next is not None:
                self.next_url = self.get_query_string({CURSOR: str(found.next)}, ["p"])
            if found.stopped and found.next is not None:
                self.looked_note = (
                    f"Looked through {found.looked:,} archived messages, back to those "
                    "archived at "
                    f"{found.next.at:%Y-%m-%d %H:%M:%S} UTC: next › goes on with older ones."
                )
        if self.cursor is not None:
            self.newest_url = self.get_query_string(remove=[CURSOR, "p"])
        self.result_count = len(entries)
        self.show_full_result_count = False
        self.show_admin_actions = True
        self.full_result_count = None
        self.result_list = entries
        self.can_show_all = False
        self.multi_page = self.next_url is not None or self.cursor is not None
        self.paginator = None
