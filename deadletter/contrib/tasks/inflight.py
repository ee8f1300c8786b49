"""Which task results are redriven right now, so that their failure is counted
on the message they came from instead of parked as a new one.

Two cases. An in-process backend (Immediate) runs the task inside the
handler: the handler sees the result and the receiver leaves it alone
(`redriving`). A backend whose workers run the task later leaves a link row
in `LINK_QUEUE` naming the new result id; the receiver that sees that result
finish takes the link and carries the message's attempts and first-failure
time over to the failure it parks (`take_link`).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from deadletter import queue
from deadletter.queue import claims
from deadletter.wire.messages import Message

__all__ = ["LINK_QUEUE", "REDRIVEN_AS", "is_redriving", "link", "note_enqueued", "take_link"]

# Not under "tasks.", so it never collides with the queue of a task queue name.
LINK_QUEUE = "deadletter.tasks.redriven"
REDRIVEN_AS = "RedrivenAs"


class _Watch:
    """The redrive in progress in this context: the id of the result it enqueued."""

    def __init__(self) -> None:
        self.result_id: str | None = None


_current: contextvars.ContextVar[_Watch | None] = contextvars.ContextVar(
    "deadletter_tasks_redriving", default=None
)


@contextlib.contextmanager
def redriving() -> Iterator[_Watch]:
    watch = _Watch()
    token = _current.set(watch)
    try:
        yield watch
    finally:
        _current.reset(token)


def note_enqueued(result_id: str) -> None:
    """The first result enqueued during a redrive is the redriven task itself;
    any task it enqueues in turn comes later and is an ordinary task."""
    watch = _current.get()
    if watch is not None and watch.result_id is None:
        watch.result_id = result_id


def is_redriving(result_id: str) -> bool:
    watch = _current.get()
    return watch is not None and watch.result_id in (None, result_id)


def link(result_id: str, msg: Message) -> bytes:
    """Remember that `msg` was redriven as `result_id` until a worker finishes it."""
    return queue.store_failed_msgs(
        LINK_QUEUE, msg.replace(extra={**msg.extra, REDRIVEN_AS: result_id})
    )


def take_link(result_id: str) -> Message | None:
    """The message redriven as `result_id`, its link row removed; None when it
    was not redriven. One index lookup when no redrive is in flight; otherwise
    a scan of the in-flight links only, never of the parked tasks."""
    if claims.tail_key(LINK_QUEUE) is None:
        return None
    for item in queue.iter_failed_msgs(LINK_QUEUE):
        if item.msg.extra.get(REDRIVEN_AS) == result_id:
            if queue.remove_msg(item.key) is not queue.Removal.REMOVED:
                return None  # taken by another receiver meanwhile
            extra = dict(item.msg.extra)
            del extra[REDRIVEN_AS]
            return item.msg.replace(extra=extra)
    return None
