"""The drain handler of parked tasks: enqueue the same task, with the same
arguments, on the same backend and queue.

Only a message the capture parked is redriven: its seal is checked before
anything it names is imported. What this process cannot act on — a seal that
does not verify, arguments cut at park time, a task that no longer imports or
is no longer a task, a backend or queue its settings lack, no Tasks framework —
is `NeedsOperator`: the drain keeps the row for an operator and never drops it
on that ground.

Otherwise outcomes follow the drain's rules: a backend that ran it at once
and saw it fail again is an ordinary failure (the row stays, `Attempts`
raised); a backend that runs it later takes it over, leaving a link so that a
new failure is counted on this message (see `inflight`).
"""

from __future__ import annotations

import contextlib
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils.module_loading import import_string

from deadletter.conf import conf
from deadletter.contrib import arguments
from deadletter.contrib.tasks import capture, framework, inflight
from deadletter.exceptions import NeedsOperator
from deadletter.wire.messages import Message

__all__ = ["TaskFailed", "TasksUnavailable", "redrive"]


class TaskFailed(Exception):
    """The backend ran the redriven task at once and it failed again."""


class TasksUnavailable(NeedsOperator):
    """No Tasks framework is installed: the message stays parked until there is one."""


def redrive(msg: Message) -> None:
    _check_parked_here(msg)
    found = framework.find()
    if found is None:
        raise TasksUnavailable("neither django.tasks nor the django-tasks backport imports")
    task, args, kwargs = _task_of(msg, found)
    runs_here = isinstance(task.get_backend(), found.immediate_backend)
    with inflight.redriving():
        # A worker must not see the new task before its link exists: on the
        # queue's database (usually the tasks' too) both commit together.
        atomic: Any = contextlib.nullcontext() if runs_here else transaction.atomic(conf.DATABASE)
        with atomic:
            result = task.enqueue(*args, **kwargs)
            if not result.is_finished:
                inflight.link(str(result.id), msg)
    if str(result.status) == framework.FAILED:
        raise TaskFailed(capture.error_line(result))


def _check_parked_here(msg: Message) -> None:
    """`NeedsOperator` unless the capture parked `msg` whole: its seal is
    valid and its arguments were not cut. Nothing the message names is imported."""
    capture.SEAL.require(msg.extra, "nothing imported")
    cut = msg.extra.get(capture.TASK_ARGS_CUT)
    if cut is not None:
        record = cut if isinstance(cut, dict) else {}
        raise NeedsOperator(
            f"task {msg.extra.get(capture.TASK)}: its arguments were cut at park time "
            f"({record.get('Bytes')} bytes, sha256 {record.get('SHA256')}), the message being "
            "over DEADLETTER_MAX_ROW_BYTES; nothing to redrive it with: run it by hand "
            "(its result row has them), then delete the message"
        )


def _task_of(msg: Message, found: framework.Framework) -> tuple[Any, list[Any], dict[str, Any]]:
    """The task to enqueue and its arguments; `NeedsOperator` when this process
    cannot make one (a path that does not import here, arguments not a list and a
    dict, a backend or queue the settings lack)."""
    extra = msg.extra
    path = extra.get(capture.TASK)
    if not isinstance(path, str) or not path:
        raise NeedsOperator(f"message names no task (no {capture.TASK!r} key)")
    args = extra.get(capture.TASK_ARGS, [])
    kwargs = extra.get(capture.TASK_KWARGS, {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise NeedsOperator(f"task {path}: arguments are not a list and a dict")
    args, kwargs = arguments.sendable(path, args), arguments.sendable(path, kwargs)
    try:
        target: Any = import_string(path)
    except ImportError as exc:
        raise NeedsOperator(
            f"task {path} does not import in this process: {exc}; deploy the code "
            "that defines it here, or delete the message"
        ) from exc
    if not isinstance(target, found.task_class):
        raise NeedsOperator(f"{path} is no longer a task but a {type(target).__name__}")
    changes: dict[str, Any] = {}
    for key, option in (
        (capture.TASK_BACKEND, "backend"),
        (capture.TASK_QUEUE, "queue_name"),
        (capture.TASK_PRIORITY, "priority"),
    ):
        if extra.get(key) is not None:
            changes[option] = extra[key]
    try:
        return target.using(**changes), args, kwargs
    except (ImproperlyConfigured, found.invalid_task) as exc:  # InvalidTaskBackend is the first
        raise NeedsOperator(
            f"task {path}: {type(exc).__name__}: {exc}; fix TASKS in this process's settings"
        ) from exc
