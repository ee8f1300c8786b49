"""The queue: park, read and remove failed messages, one row per message.

The Go queue package's rules (docs/design.md, docs/drain.md), one module a
job: `api` (the public calls: store, fetch, iterate, dequeue, remove, their
async twins), `rows` (the rules a read applies: age, split, stamp, drop;
`DropReason`), `claims` (what the drain needs to claim and settle a message),
`browse` (rows as they are, for operators), `age`, `causes`, `legacy` and
`seals`. The public calls are importable from here.
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
    page_sql,
    queue_names,
    remove_msg,
    store_failed_msgs,
)
from deadletter.queue.claims import (
    Preview,
    atomic,
    can_claim_rows,
    claim_failed_msg,
    claiming,
    count_rows,
    database_vendor,
    drop_msg,
    fetch_msg,
    preview_failed_msgs,
    replace_msg,
    rewrite_msg,
    sqlite_file,
    tail_key,
)
from deadletter.queue.rows import (
    ATTEMPTS_KEY,
    LAST_ERROR_KEY,
    Dropped,
    DropReason,
    OnDrop,
    Queued,
    QueueingError,
    attempts_of,
    insert_value,
)
from deadletter.queue.waiting import (
    RetryCursor,
    Waiting,
    claim_due_retry,
    due_retries,
    last_passes,
    record_passes,
    waiting,
    waiting_keys,
)

__all__ = [
    "RetryCursor",
    "Waiting",
    "claim_due_retry",
    "due_retries",
    "last_passes",
    "record_passes",
    "waiting",
    "waiting_keys",
    "MAX_QUEUE_AGE",  # the module's __getattr__: the setting, read when asked
    "Queued",
    "QueueingError",
    "Removal",
    "adequeue",
    "afetch_failed_msgs",
    "aremove_msg",
    "astore_failed_msgs",
    "dequeue",
    "fetch_failed_msgs",
    "iter_failed_msgs",
    "remove_msg",
    "store_failed_msgs",
]

_DRAIN_SIDE = (  # importable from here for the drain, the admin and the contrib apps
    attempts_of,
    ATTEMPTS_KEY,
    LAST_ERROR_KEY,
    Dropped,
    DropReason,
    OnDrop,
    Preview,
    atomic,
    can_claim_rows,
    claim_failed_msg,
    claiming,
    count_rows,
    database_vendor,
    drop_msg,
    fetch_msg,
    insert_value,
    page_sql,
    preview_failed_msgs,
    queue_names,
    replace_msg,
    rewrite_msg,
    sqlite_file,
    tail_key,
)


def __getattr__(name: str) -> Any:
    """`MAX_QUEUE_AGE` is the `DEADLETTER_MAX_QUEUE_AGE` setting, read when asked."""
    if name == "MAX_QUEUE_AGE":
        return conf.MAX_QUEUE_AGE
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
