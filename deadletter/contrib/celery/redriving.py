"""The drain handler of parked Celery tasks: send the same task by name, with the
same arguments, to the queue it was delivered from.

Only a message the capture parked is sent: its seal is checked before the task
name is looked up, and a message without a valid seal, or whose arguments were
cut at park time, is a `PermanentFailure`, and so is a task name the project
no longer registers. The publish waits for the broker to accept the message
(publisher confirms on AMQP; a Redis push returns once stored), so the drain
removes the row only after that; a publish that fails leaves it, an ordinary
failed attempt.
"""

from __future__ import annotations

from typing import Any

from deadletter.contrib.celery import capture
from deadletter.exceptions import PermanentFailure
from deadletter.wire.messages import Message

__all__ = ["redrive"]


def redrive(msg: Message) -> None:
    _check_parked_here(msg)
    extra = msg.extra
    name = extra.get(capture.TASK)
    args = extra.get(capture.TASK_ARGS, [])
    kwargs = extra.get(capture.TASK_KWARGS, {})
    if not isinstance(name, str) or not name:
        raise PermanentFailure(f"message names no task (no {capture.TASK!r} key)")
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise PermanentFailure(f"task {name}: arguments are not a list and a dict")
    app = _app()
    task = app.tasks.get(name)
    if task is None:
        raise PermanentFailure(f"task {name} is no longer registered with the Celery app")
    options: dict[str, Any] = {
        "queue": extra.get(capture.TASK_QUEUE) or app.conf.task_default_queue,
        "headers": {capture.ORIGINAL_ID_HEADER: str(extra.get(capture.TASK_ID, ""))},
        "retry": False,
    }
    if extra.get(capture.TASK_ROUTING_KEY):
        options["routing_key"] = extra[capture.TASK_ROUTING_KEY]
    with _confirming(app) as connection:
        task.apply_async(args=args, kwargs=kwargs, connection=connection, **options)


def _check_parked_here(msg: Message) -> None:
    """`PermanentFailure` unless the capture parked `msg` whole: its seal is valid
    and its arguments were not cut."""
    capture.SEAL.require(msg.extra, "nothing sent")
    cut = msg.extra.get(capture.TASK_ARGS_CUT)
    if cut is not None:
        why = cut.get("Why") if isinstance(cut, dict) else cut
        raise PermanentFailure(
            f"task {msg.extra.get(capture.TASK)}: its arguments were not kept at park time "
            f"({why}); nothing to send it with"
        )


def _app() -> Any:
    from celery import current_app

    return current_app._get_current_object()


def _confirming(app: Any) -> Any:
    """A broker connection whose publishes wait for the broker's accept: AMQP's
    publisher confirms are asked for on this connection whatever the app sets."""
    options = dict(app.conf.broker_transport_options or {})
    options["confirm_publish"] = True
    return app.connection_for_write(transport_options=options)
