"""Search across parked messages: one language (`grammar`), one projection kept in
step with every write (`index`, over the words `words` defines), one way to run
a query (`lookup`). The admin, the API, the commands and the redrives call these.
"""

from __future__ import annotations

from deadletter.queue.search.grammar import MAX_QUERY_CHARS, MAX_TERMS, SearchError, parse, quote
from deadletter.queue.search.index import (
    SweepCursor,
    index_pending,
    iter_sweep,
    pending_count,
    sweep,
    upkeep,
)
from deadletter.queue.search.lookup import (
    MAX_CANDIDATES,
    Count,
    SearchTooCostly,
    count_matching,
    iter_matching_rows,
    keys_page,
    matching_keys,
)
from deadletter.queue.search.query import Cause, Query

__all__ = [
    "MAX_CANDIDATES",
    "MAX_QUERY_CHARS",
    "MAX_TERMS",
    "Cause",
    "Count",
    "Query",
    "SearchError",
    "SearchTooCostly",
    "SweepCursor",
    "count_matching",
    "index_pending",
    "iter_matching_rows",
    "iter_sweep",
    "keys_page",
    "matching_keys",
    "parse",
    "pending_count",
    "quote",
    "sweep",
    "upkeep",
]
