"""deadletter: a persistent dead-letter queue on the Django ORM.

The public API is re-exported here lazily, so importing the package (as
Django does while loading INSTALLED_APPS) imports no models.
"""

from __future__ import annotations

import importlib
from typing import Any

from deadletter.exceptions import DeadletterError, NeedsOperator, PermanentFailure

__all__ = [
    "MAX_QUEUE_AGE",
    "DeadletterError",
    "EventCode",
    "GoOnlyTime",
    "GoTime",
    "Message",
    "NeedsOperator",
    "PermanentFailure",
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

_LAZY = {
    "EventCode": "deadletter.wire.messages",
    "Message": "deadletter.wire.messages",
    "GoTime": "deadletter.wire.gotime",
    "GoOnlyTime": "deadletter.wire.gotime",
}


def __getattr__(name: str) -> Any:
    """The public names, imported on first use; `MAX_QUEUE_AGE` is the
    `DEADLETTER_MAX_QUEUE_AGE` setting in force when it is read."""
    if name == "MAX_QUEUE_AGE":
        from deadletter.conf import conf

        return conf.MAX_QUEUE_AGE
    if name in __all__:
        module = importlib.import_module(_LAZY.get(name, "deadletter.queue"))
        return getattr(module, name)
    raise AttributeError(f"module 'deadletter' has no attribute {name!r}")
