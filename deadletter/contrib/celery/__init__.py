"""Dead letters for Celery: a task that fails for good (its own retries used up)
is parked once in queue `celery.<the queue it was delivered from>`, and
`redrive` (a drain handler) sends it back to that queue by name.

Opt in with `"deadletter.contrib.celery"` in INSTALLED_APPS and a Celery app set
up as Celery's Django guide says. A task opts out with `deadletter=False` in its
decorator, or by name in `DEADLETTER_CELERY_EXCLUDE`; `DEADLETTER_CELERY_EXCEPTIONS`
parks only the exception types it lists.
"""

from __future__ import annotations

from deadletter.wire.messages import Message

__all__ = ["redrive"]


def redrive(msg: Message) -> None:
    """The drain handler for `celery.*` queues: send the parked task again by name,
    with its arguments, to its queue, only if the capture parked it (its seal is
    checked first); the row goes once the broker has accepted the message.

    Defined here so that `DEADLETTER_HANDLERS` can name
    `deadletter.contrib.celery.redrive` without importing Celery early.
    """
    from deadletter.contrib.celery.redriving import redrive as run

    run(msg)
