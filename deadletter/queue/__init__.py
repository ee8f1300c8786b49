"""The queue: park, read and remove failed messages, one row per message.

The Go queue package's rules (docs/design.md, docs/drain.md), one module a
job: `api` (the public calls: store, fetch, iterate, dequeue, remove, their
async twins), `rows` (the rules a read applies: age, split, stamp, drop;
`DropReason`), `claims` (what the drain reads to hand a message over),
`settlements` (how it settles the row), `claim_transactions` (the
transactions both run in), `browse` (rows as they are, for operators), `age`,
`causes`, `legacy` and `seals`; `archive` (what left a queue other than by
delivery, and restoring it).
The public calls, and only they, are importable from here; the drain,
the admin and the contrib apps import the rest from the module that defines it.
"""

from __future__ import annotations

from typing import Any

from deadletter.conf import conf
from deadletter.queue.api import (
    Removal,
    adequeue,
    afetch_failed_msgs,
    aremove_msg,
    astore_failed_msgs,
    dequeue,
    fetch_failed_msgs,
    iter_failed_msgs,
    remove_msg,
    store_failed_msgs,
)
from deadletter.queue.archive import archived_msgs, restore_msg
from deadletter.queue.rows import Queued, QueueingError

__all__ = [
    "MAX_QUEUE_AGE",  # the module's __getattr__: the setting, read when asked
    "Queued",
    "QueueingError",
    "Removal",
    "adequeue",
    "afetch_failed_msgs",
    "archived_msgs",
    "aremove_msg",
    "astore_failed_msgs",
    "dequeue",
    "fetch_failed_msgs",
    "iter_failed_msgs",
    "remove_msg",
    "restore_msg",
    "store_failed_msgs",
]


def __getattr__(name: str) -> Any:
    """`MAX_QUEUE_AGE` is the `DEADLETTER_MAX_QUEUE_AGE` setting, read when asked."""
    if name == "MAX_QUEUE_AGE":
        return conf.MAX_QUEUE_AGE
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
