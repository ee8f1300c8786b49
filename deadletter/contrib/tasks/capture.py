"""Park every task result that finishes FAILED, from the framework's
`task_finished` signal, as an ordinary message whose extra keys carry the task.

The keys redrive acts on are sealed (`SEAL`): the redrive runs only what
this capture parked, never a task a message from elsewhere names. A message
over `DEADLETTER_MAX_ROW_BYTES` is parked without its arguments, so the
failure is still seen.

The receiver runs inside the backend's own error handling (the Immediate
backend in the caller's thread, a worker in its loop), so it never raises:
a message it cannot park is logged with the task's id and path.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import UTC, datetime
from typing import Any

from django.apps import apps
from django.core import checks
from django.db import DatabaseError, connections

from deadletter import queue
from deadletter.conf import conf
from deadletter.contrib.tasks import framework, inflight
from deadletter.contrib.tasks.checks import check_framework
from deadletter.drain import LAST_ERROR_LIMIT
from deadletter.queue import history, rows, seals
from deadletter.queue.rows import ATTEMPTS_KEY, LAST_ERROR_KEY
from deadletter.reports import labels
from deadletter.wire import codec
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message

__all__ = [
    "QUEUE_PREFIX",
    "SEAL",
    "TASK",
    "TASK_ARGS",
    "TASK_ARGS_CUT",
    "TASK_BACKEND",
    "TASK_EXCEPTION",
    "TASK_KWARGS",
    "TASK_PRIORITY",
    "TASK_QUEUE",
    "TASK_RESULT_ID",
    "TASK_SEAL",
    "TASK_TRACEBACK",
    "cut_arguments",
    "enabled",
    "error_line",
    "install",
    "message_of",
    "park",
    "queue_for",
]

logger = logging.getLogger("deadletter")

QUEUE_PREFIX = "tasks."
APP = "deadletter.contrib.tasks"
TRACEBACK_LINES = 20

WORKER_ACTOR = "worker"
"""Who a redriven task's failure in a Tasks worker is recorded as (`queue.history`)."""

# The extra keys of a parked task (Go-style names, like Attempts and LastError).
TASK = "Task"
TASK_ARGS = "TaskArgs"
TASK_KWARGS = "TaskKwargs"
TASK_BACKEND = "TaskBackend"
TASK_QUEUE = "TaskQueue"
TASK_PRIORITY = "TaskPriority"
TASK_RESULT_ID = "TaskResultID"
TASK_EXCEPTION = "TaskException"
TASK_TRACEBACK = "TaskTraceback"
TASK_ARGS_CUT = "TaskArgsCut"
TASK_SEAL = "TaskSeal"

SEAL = seals.Seal(
    purpose=APP,
    key=TASK_SEAL,
    fields=(TASK, TASK_ARGS, TASK_KWARGS, TASK_BACKEND, TASK_QUEUE, TASK_PRIORITY, TASK_ARGS_CUT),
)
seals.reserve(
    APP,
    (
        TASK,
        TASK_ARGS,
        TASK_KWARGS,
        TASK_BACKEND,
        TASK_QUEUE,
        TASK_PRIORITY,
        TASK_RESULT_ID,
        TASK_EXCEPTION,
        TASK_TRACEBACK,
        TASK_ARGS_CUT,
        TASK_SEAL,
        inflight.REDRIVEN_AS,
    ),
)

labels.register(
    {
        TASK: "task",
        TASK_ARGS: "arguments",
        TASK_KWARGS: "keyword arguments",
        TASK_BACKEND: "task backend",
        TASK_QUEUE: "task queue",
        TASK_PRIORITY: "priority",
        TASK_RESULT_ID: "task result id",
        TASK_EXCEPTION: "exception",
        TASK_TRACEBACK: "traceback",
        TASK_ARGS_CUT: "arguments not kept",
        TASK_SEAL: "seal",
        inflight.REDRIVEN_AS: "redriven as result id",
    }
)


def queue_for(queue_name: str) -> str:
    return f"{QUEUE_PREFIX}{queue_name}"


def enabled() -> bool:
    """Asked per result, so that the opt-in follows the settings in force."""
    return apps.is_installed(APP) or conf.CAPTURE_TASKS


def install() -> None:
    """Register the check and connect the receivers (once, however often called)."""
    checks.register(check_framework, "deadletter")
    found = framework.find()
    if found is None:
        return
    found.task_enqueued.connect(_on_enqueued, dispatch_uid="deadletter-tasks-enqueued")
    found.task_finished.connect(_on_finished, dispatch_uid="deadletter-tasks-finished")


def _on_enqueued(sender: Any, task_result: Any, **kwargs: Any) -> None:
    inflight.note_enqueued(str(task_result.id))


def _on_finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
    try:
        if not enabled() or inflight.is_redriving(str(task_result.id)):
            return
        redriven = inflight.take_link(str(task_result.id))
        if str(task_result.status) == framework.FAILED:
            park(task_result, redriven)
    except Exception:
        logger.exception(
            "could not park failed task id=%s path=%s",
            getattr(task_result, "id", "?"),
            getattr(getattr(task_result, "task", None), "module_path", "?"),
        )


def message_of(result: Any) -> Message:
    """The message a failed result is parked as, sealed; every value is plain JSON."""
    task = result.task
    error = result.errors[-1] if result.errors else None
    lines = error.traceback.rstrip("\n").splitlines() if error else []
    extra: dict[str, Any] = {
        TASK: task.module_path,
        TASK_ARGS: list(result.args),
        TASK_KWARGS: dict(result.kwargs),
        TASK_BACKEND: result.backend,
        TASK_QUEUE: task.queue_name,
        TASK_PRIORITY: task.priority,
        TASK_RESULT_ID: str(result.id),
        TASK_EXCEPTION: error.exception_class_path if error else "",
        TASK_TRACEBACK: "\n".join(line[:LAST_ERROR_LIMIT] for line in lines[-TRACEBACK_LINES:]),
        LAST_ERROR_KEY: error_line(result),
    }
    return Message(timestamp=result.finished_at, subject=task.module_path, extra=SEAL.sealed(extra))


def cut_arguments(msg: Message) -> Message:
    """`msg` without its arguments, which a record of their canonical encoding
    (`Bytes`, `SHA256`) replaces, sealed again: for a message too large to park."""
    extra = dict(msg.extra)
    arguments = {TASK_ARGS: extra.pop(TASK_ARGS, []), TASK_KWARGS: extra.pop(TASK_KWARGS, {})}
    encoded = seals.canonical(arguments)
    extra[TASK_ARGS_CUT] = {"Bytes": len(encoded), "SHA256": hashlib.sha256(encoded).hexdigest()}
    return msg.replace(extra=SEAL.sealed(extra))


def error_line(result: Any) -> str:
    """The traceback's last line (`ValueError: boom`), cut to the drain's LastError size."""
    error = result.errors[-1] if result.errors else None
    if error is None:
        return "task failed without an error recorded"
    lines = error.traceback.strip().splitlines()
    return (lines[-1] if lines else error.exception_class_path)[:LAST_ERROR_LIMIT]


def park(result: Any, redriven: Message | None = None) -> bytes | None:
    """Park a failed result in `tasks.<queue_name>`; for a redriven one (its
    link message given) the attempts go up by one and the first-failure time
    is kept, and at `DEADLETTER_MAX_ATTEMPTS` it is dropped as a drain would.
    Over `DEADLETTER_MAX_ROW_BYTES` it is parked without its arguments rather
    than lost to a log line."""
    msg = message_of(result)
    name = queue_for(result.task.queue_name)
    if redriven is not None:
        attempts = (rows.attempts_of(redriven.extra) or 0) + 1
        msg = msg.replace(queued_at=redriven.queued_at, extra={**msg.extra, ATTEMPTS_KEY: attempts})
        limit = conf.MAX_ATTEMPTS
        if limit is not None and attempts >= limit:
            logger.warning(
                "dropping task after max attempts queue=%s path=%s attempts=%s error=%s",
                name,
                result.task.module_path,
                attempts,
                msg.extra[LAST_ERROR_KEY],
            )
            return None
    if msg.queued_at is None:
        msg = msg.replace(queued_at=GoTime.now())
    size = len(codec.encode_one(msg))
    if size > conf.MAX_ROW_BYTES:
        msg = cut_arguments(msg)
        logger.warning(
            "parking task without its arguments queue=%s path=%s bytes=%d limit=%d",
            name,
            msg.subject,
            size,
            conf.MAX_ROW_BYTES,
        )
    key = queue.store_failed_msgs(name, msg)
    logger.info("parked failed task queue=%s key=%s path=%s", name, key.hex(), msg.subject)
    if redriven is not None:
        _record_worker_attempt(result, key, msg)
    return key


def _record_worker_attempt(result: Any, key: bytes, msg: Message) -> None:
    """The redriven task's failure in a worker, in the history of the message it is
    parked as (actor `worker`); its run time from the result's start and finish."""
    started, finished = getattr(result, "started_at", None), getattr(result, "finished_at", None)
    duration = (finished - started).total_seconds() if started and finished else None
    try:
        history.record_attempt(
            connections[conf.DATABASE],
            key,
            at=started or finished or datetime.now(UTC),
            duration=duration,
            outcome=history.AttemptOutcome.FAILED,
            error=str(msg.extra.get(LAST_ERROR_KEY, "")),
            actor=WORKER_ACTOR,
            attempts=rows.attempts_of(msg.extra),
        )
    except DatabaseError:
        logger.exception("could not record the worker's attempt key=%s", key.hex())
