"""The change list's search box: the query language of `queue.search`, read once
per request, and the selection an action on "all matching" a search acts on."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from django.contrib.admin.views.main import SEARCH_VAR
from django.db.models import QuerySet
from django.http import HttpRequest

from deadletter.models import QueuedMessage
from deadletter.queue import search
from deadletter.queue.search import lookup, qualifiers

__all__ = ["HELP", "MAX_ACTION_ROWS", "SearchTooBroad", "query_of", "searched_rows"]

HELP = qualifiers.help_text()
# An action on "all matching" a search acts on the keys the search gives, read
# whole first: more than this is refused (a redrive takes any number).
MAX_ACTION_ROWS = 10_000


class SearchTooBroad(ValueError):
    """A search matching too many rows for an action on all of them at once."""


def query_of(request: HttpRequest, cause: str | None = None) -> search.Query:
    """The search the request asks for (`?q=`), with the cause filter's signature
    as one more condition; `search.SearchError` for a malformed one."""
    query = search.parse(request.GET.get(SEARCH_VAR, ""))
    if cause:
        query = dataclasses.replace(query, causes=(*query.causes, search.Cause(cause)))
    return query


def searched_rows(
    queryset: QuerySet[QueuedMessage],
    query: search.Query,
    queue: str | None,
    *,
    reveal: bool,
    spans: Sequence[tuple[bytes, bytes | None]] | None,
) -> QuerySet[QueuedMessage]:
    """`queryset` narrowed to the rows `query` matches (in what the user may see:
    `reveal`, in the key ranges `spans` when not None); `SearchTooBroad` past
    `MAX_ACTION_ROWS`, `search.SearchTooCostly` past that many candidates and what a
    page may read besides."""
    found: list[bytes] = []
    budget = MAX_ACTION_ROWS + lookup.MAX_CANDIDATES
    rows = search.iter_matching_rows(query, queue=queue, reveal=reveal, spans=spans, budget=budget)
    for key, _ in rows:
        found.append(key)
        if len(found) > MAX_ACTION_ROWS:
            raise SearchTooBroad(
                f"The search matches more than {MAX_ACTION_ROWS:,} messages, too many for one "
                "action: narrow it, or redrive them (Redrive matching…)."
            )
    return queryset.filter(key__in=found)
