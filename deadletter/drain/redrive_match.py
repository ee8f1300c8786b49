"""What a redrive walks: the keys of its queue its filter matches, oldest first, up
to the key the plan stopped at.

A filter with no search text and no time bound is the whole queue: its per-message
key range, read from the primary key's index, exact whether or not the search's
index has caught up with the newest rows. Anything else is the search's
(`queue.search`): one query language for the admin, the API and the commands.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from deadletter.conf import conf
from deadletter.models import QueuedMessage
from deadletter.queue import search
from deadletter.wire import keys

__all__ = ["Filter"]


@dataclasses.dataclass(frozen=True, slots=True)
class Filter:
    """A redrive's filter over queue `queue`: `query` is the parsed search (None: every
    message of the queue)."""

    queue: str
    query: search.Query | None = None
    reveal: bool = True

    @classmethod
    def parse(
        cls,
        queue: str,
        text: str = "",
        *,
        after: datetime | None = None,
        before: datetime | None = None,
        reveal: bool = True,
    ) -> Filter:
        """The filter of `text`, `after` and `before` (bounds on the first failure);
        without `reveal` the search never matches a value `DEADLETTER_REDACT` masks.
        The search's `SearchError` for a malformed query."""
        if not text.strip() and after is None and before is None:
            return cls(queue)
        return cls(queue, search.parse(text, after=after, before=before), reveal)

    def keys(self, *, after: bytes | None, until: bytes, limit: int) -> list[bytes]:
        """Up to `limit` matching keys above `after` and at most `until`, ascending."""
        if self.query is not None:
            return [
                bytes(k)
                for k in search.matching_keys(
                    self.query,
                    queue=self.queue,
                    after_key=after,
                    until_key=until,
                    limit=limit,
                    reveal=self.reveal,
                )
            ]
        low, high = keys.message_bounds(self.queue)
        rows = _rows().filter(key__gte=low, key__lt=high, key__lte=until)
        if after is not None:
            rows = rows.filter(key__gt=after)
        return [
            bytes(k) for k in rows.order_by("key").values_list("key", flat=True)[:limit].iterator()
        ]

    def count(self, *, until: bytes | None) -> int:
        """How many messages of the queue it matches up to `until` (0 when None)."""
        if until is None:
            return 0
        if self.query is not None:
            return int(
                search.count_matching(
                    self.query, queue=self.queue, until_key=until, reveal=self.reveal
                )
            )
        low, high = keys.message_bounds(self.queue)
        return _rows().filter(key__gte=low, key__lt=high, key__lte=until).count()


def _rows() -> Any:
    return QueuedMessage.objects.using(conf.DATABASE)
