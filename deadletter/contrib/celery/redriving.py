"""The drain handler of parked Celery tasks: send the same task by name, with the
same arguments, to the queue it was delivered from.

The task is looked up as a worker would find it: the project's task modules are
loaded first (`load_task_modules`), since a `manage.py` process, a web server or
a shell registers the tasks `app.autodiscover_tasks()` finds only once
something asks the app to import them. Only a message the capture parked is
sent: its seal is checked before the name is looked up. What this process
cannot act on — a seal that does not verify, arguments cut at park time or that
cannot be sent, a task name still unknown — is `NeedsOperator`: the drain keeps
the row for an operator and never drops it on that ground. The publish waits
for the broker to accept the message (publisher confirms on AMQP; a Redis push
returns once stored), so the drain removes the row only after that; a publish
that fails leaves it, an ordinary failed attempt.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any

from kombu.exceptions import ContentDisallowed, EncodeError

from deadletter.contrib import arguments
from deadletter.contrib.celery import capture
from deadletter.exceptions import NeedsOperator
from deadletter.wire.messages import Message

__all__ = ["load_task_modules", "redrive"]

logger = logging.getLogger("deadletter")

_loaded: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()
_loading = threading.Lock()


def redrive(msg: Message) -> None:
    _check_parked_here(msg)
    extra = msg.extra
    name = extra.get(capture.TASK)
    args = extra.get(capture.TASK_ARGS, [])
    kwargs = extra.get(capture.TASK_KWARGS, {})
    if not isinstance(name, str) or not name:
        raise NeedsOperator(f"message names no task (no {capture.TASK!r} key); nothing sent")
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise NeedsOperator(f"task {name}: arguments are not a list and a dict; nothing sent")
    args, kwargs = arguments.sendable(name, args), arguments.sendable(name, kwargs)
    app = _app()
    problem = load_task_modules(app)
    task = app.tasks.get(name)
    if task is None:
        why = f": {problem}" if problem else ""
        raise NeedsOperator(
            f"task {name} is not registered with Celery app {app.main!r} in this process, "
            f"even after loading its task modules as a worker does{why}; deploy the code "
            "that defines it here, or delete the message"
        )
    options: dict[str, Any] = {
        "queue": extra.get(capture.TASK_QUEUE) or app.conf.task_default_queue,
        "headers": {capture.ORIGINAL_ID_HEADER: str(extra.get(capture.TASK_ID, ""))},
        "retry": False,
    }
    if extra.get(capture.TASK_ROUTING_KEY):
        options["routing_key"] = extra[capture.TASK_ROUTING_KEY]
    with _confirming(app) as connection:
        try:
            task.apply_async(args=args, kwargs=kwargs, connection=connection, **options)
        except (EncodeError, ContentDisallowed) as exc:
            raise NeedsOperator(
                f"task {name}: its arguments cannot be sent with serializer "
                f"{task.serializer or app.conf.task_serializer!r}: {exc}; nothing sent"
            ) from exc


def load_task_modules(app: Any) -> str | None:
    """Import `app`'s task modules as a worker does when it starts
    (`app.loader.import_default_modules()`, which sends the `import_modules`
    signal `autodiscover_tasks()` waits for), once per app and process.
    Returns why that failed (logged; what did import stays registered), else None."""
    with _loading:
        if app in _loaded:
            return _loaded[app]
        problem: str | None = None
        try:
            app.loader.import_default_modules()
        except Exception as exc:  # a project's module that does not import: say which
            logger.exception("could not load the Celery app's task modules app=%s", app.main)
            problem = f"loading them failed: {type(exc).__name__}: {exc}"
        _loaded[app] = problem
        return problem


def _check_parked_here(msg: Message) -> None:
    """`NeedsOperator` unless the capture parked `msg` whole: its seal is valid
    and its arguments were not cut."""
    capture.SEAL.require(msg.extra, "nothing sent")
    cut = msg.extra.get(capture.TASK_ARGS_CUT)
    if cut is not None:
        why = cut.get("Why") if isinstance(cut, dict) else cut
        raise NeedsOperator(
            f"task {msg.extra.get(capture.TASK)}: its arguments were not kept at park time "
            f"({why}); nothing to send it with: run it by hand, then delete the message"
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
