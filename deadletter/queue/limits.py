"""A queue's own limits: how long its archive keeps what left it (`archive_for`),
its age limit (`max_age`) and whether operators may edit its messages
(`editable`), as `queue.config` reads them, for a queue the project does not name
too (the global settings, then).

Pure: settings in, values out, no database.
"""

from __future__ import annotations

from datetime import timedelta

from deadletter.conf import conf
from deadletter.queue.config import ARCHIVE_OFF, MAX_AGE_LIMIT, queue_config

__all__ = [
    "ARCHIVE_OFF",
    "MAX_AGE_LIMIT",
    "archive_for",
    "editable",
    "max_age",
]


def archive_for(queue: str) -> timedelta | None:
    """How long the archive keeps an entry of `queue`: None for ever, `ARCHIVE_OFF`
    for not at all (the queue's `archive_for`, else `DEADLETTER_ARCHIVE_FOR`)."""
    config = queue_config(queue)
    return conf.ARCHIVE_FOR if config is None else config.archive_for


def max_age(queue: str) -> timedelta:
    """`queue`'s age limit: its `max_age`, else `DEADLETTER_MAX_QUEUE_AGE`."""
    config = queue_config(queue)
    return conf.MAX_QUEUE_AGE if config is None else config.max_age


def editable(queue: str) -> bool:
    """Whether operators may edit `queue`'s messages (its `editable`; off by default)."""
    config = queue_config(queue)
    return config is not None and config.editable
