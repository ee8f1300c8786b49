"""Dead letters for Django's Tasks framework (`django.tasks`, or the `django-tasks` backport).

Every task result that finishes FAILED is parked in queue `tasks.<queue_name>`,
and `redrive` (a drain handler) enqueues it again. Opt in with
`"deadletter.contrib.tasks"` in INSTALLED_APPS or `DEADLETTER_CAPTURE_TASKS = True`.
"""

from __future__ import annotations

from deadletter.wire.messages import Message

__all__ = ["redrive"]


def redrive(msg: Message) -> None:
    """The drain handler for `tasks.*` queues: enqueue the parked task again,
    only if the capture parked it (its seal is checked before anything is imported).

    Defined here so that `DEADLETTER_HANDLERS` can name
    `deadletter.contrib.tasks.redrive` without importing the framework early.
    """
    from deadletter.contrib.tasks.redriving import redrive as run

    run(msg)
