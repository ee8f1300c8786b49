"""Park a Celery task that fails for good, from Celery's `task_failure` signal: it
is sent once per task, after the task's own retries (`autoretry_for`,
`self.retry`) are used up, and never for a retry, a success, a revoke or a
reject.

The keys redrive acts on are sealed (`SEAL`), so redrive sends only what this
capture parked. The receiver runs inside the worker's own error handling: it
never raises, and a message it cannot park (the database is down, say) is
logged with the task's id and name while the worker carries on.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import cbor2
from django.core import checks
from django.utils.module_loading import import_string

from deadletter import queue
from deadletter.conf import conf
from deadletter.contrib.celery.checks import check_celery
from deadletter.drain import LAST_ERROR_LIMIT, last_error
from deadletter.queue import seals
from deadletter.queue.rows import LAST_ERROR_KEY
from deadletter.reports import labels
from deadletter.wire import codec
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message

__all__ = [
    "APP",
    "QUEUE_PREFIX",
    "SEAL",
    "TASK",
    "TASK_ARGS",
    "TASK_ARGS_CUT",
    "TASK_EXCHANGE",
    "TASK_HOSTNAME",
    "TASK_ID",
    "TASK_KWARGS",
    "TASK_QUEUE",
    "TASK_RETRIES",
    "TASK_ROUTING_KEY",
    "TASK_TRACEBACK",
    "install",
    "message_of",
    "park",
    "queue_for",
    "wanted",
]

logger = logging.getLogger("deadletter")

APP = "deadletter.contrib.celery"
QUEUE_PREFIX = "celery."
TRACEBACK_LINES = 20
TRACEBACK_BYTES = 8192
# The header a redriven task carries: the id of the task it was parked as.
ORIGINAL_ID_HEADER = "deadletter_original_task_id"

# The extra keys of a parked Celery task (Go-style names, like Attempts and LastError).
TASK = "CeleryTask"
TASK_ID = "CeleryTaskID"
TASK_ARGS = "CeleryArgs"
TASK_KWARGS = "CeleryKwargs"
TASK_QUEUE = "CeleryQueue"
TASK_ROUTING_KEY = "CeleryRoutingKey"
TASK_EXCHANGE = "CeleryExchange"
TASK_RETRIES = "CeleryRetries"
TASK_HOSTNAME = "CeleryHostname"
TASK_TRACEBACK = "CeleryTraceback"
TASK_EXCEPTION = "CeleryException"
TASK_ORIGINAL_ID = "CeleryOriginalTaskID"
TASK_ARGS_CUT = "CeleryArgsCut"
TASK_SEAL = "CelerySeal"

SEAL = seals.Seal(
    purpose=APP,
    key=TASK_SEAL,
    fields=(
        TASK,
        TASK_ARGS,
        TASK_KWARGS,
        TASK_QUEUE,
        TASK_ROUTING_KEY,
        TASK_EXCHANGE,
        TASK_ARGS_CUT,
    ),
)
seals.reserve(
    APP,
    (
        TASK,
        TASK_ID,
        TASK_ARGS,
        TASK_KWARGS,
        TASK_QUEUE,
        TASK_ROUTING_KEY,
        TASK_EXCHANGE,
        TASK_RETRIES,
        TASK_HOSTNAME,
        TASK_TRACEBACK,
        TASK_EXCEPTION,
        TASK_ORIGINAL_ID,
        TASK_ARGS_CUT,
        TASK_SEAL,
    ),
)

labels.register(
    {
        TASK: "Celery task",
        TASK_ID: "Celery task id",
        TASK_ARGS: "arguments",
        TASK_KWARGS: "keyword arguments",
        TASK_QUEUE: "Celery queue",
        TASK_ROUTING_KEY: "routing key",
        TASK_EXCHANGE: "exchange",
        TASK_RETRIES: "Celery retries",
        TASK_HOSTNAME: "worker",
        TASK_TRACEBACK: "traceback",
        TASK_EXCEPTION: "exception",
        TASK_ORIGINAL_ID: "first parked as task id",
        TASK_ARGS_CUT: "arguments not kept",
        TASK_SEAL: "seal",
    }
)


def queue_for(delivery_queue: str) -> str:
    return f"{QUEUE_PREFIX}{delivery_queue}"


def install() -> None:
    """Register the checks and connect the receiver (once, however often called)."""
    from celery import signals

    checks.register(check_celery, "deadletter")
    signals.task_failure.connect(_on_failure, dispatch_uid="deadletter-celery-failure", weak=False)


def wanted(task: Any, exception: BaseException) -> bool:
    """Whether a task that failed for good with `exception` is parked: not when the
    task says `deadletter=False`, its name is in `DEADLETTER_CELERY_EXCLUDE`, or
    `DEADLETTER_CELERY_EXCEPTIONS` lists types and this is none of them."""
    if getattr(task, "deadletter", True) is False or task.name in conf.CELERY_EXCLUDE:
        return False
    kinds = conf.CELERY_EXCEPTIONS
    if kinds is None:
        return True
    return isinstance(exception, tuple(import_string(path) for path in kinds))


def _on_failure(
    sender: Any = None,
    task_id: str | None = None,
    exception: BaseException | None = None,
    args: Any = None,
    kwargs: Any = None,
    einfo: Any = None,
    **rest: Any,
) -> None:
    try:
        if sender is None or exception is None or not wanted(sender, exception):
            return
        park(sender, str(task_id), exception, args, kwargs, einfo)
    except Exception:
        logger.exception(
            "could not park failed Celery task id=%s name=%s",
            task_id,
            getattr(sender, "name", "?"),
        )


def message_of(
    task: Any, task_id: str, exception: BaseException, args: Any, kwargs: Any, einfo: Any
) -> Message:
    """The message a failed task is parked as, sealed: its name, id, arguments as
    Celery gave them to the task, where it was delivered from, and why it failed."""
    request = task.request
    delivery = dict(getattr(request, "delivery_info", None) or {})
    default_queue = task.app.conf.task_default_queue
    routing_key = delivery.get("routing_key") or default_queue
    text = str(getattr(einfo, "traceback", "") or "")
    lines = [line[:LAST_ERROR_LIMIT] for line in text.rstrip("\n").splitlines()[-TRACEBACK_LINES:]]
    traceback = "\n".join(lines).encode("utf-8")[-TRACEBACK_BYTES:].decode("utf-8", "ignore")
    extra: dict[str, Any] = {
        TASK: task.name,
        TASK_ID: task_id,
        TASK_ARGS: list(args or ()),
        TASK_KWARGS: dict(kwargs or {}),
        TASK_QUEUE: delivery.get("queue") or routing_key,
        TASK_ROUTING_KEY: routing_key,
        TASK_EXCHANGE: delivery.get("exchange") or "",
        TASK_RETRIES: int(getattr(request, "retries", 0) or 0),
        TASK_HOSTNAME: str(getattr(request, "hostname", "") or ""),
        TASK_EXCEPTION: f"{type(exception).__module__}.{type(exception).__qualname__}",
        TASK_TRACEBACK: traceback,
        LAST_ERROR_KEY: last_error(exception),
    }
    original = _header(request, ORIGINAL_ID_HEADER)
    if original:
        extra[TASK_ORIGINAL_ID] = original
    try:
        seals.canonical({TASK_ARGS: extra[TASK_ARGS], TASK_KWARGS: extra[TASK_KWARGS]})
    except (cbor2.CBOREncodeError, TypeError, ValueError) as exc:
        extra = _cut(extra, f"not storable: {type(exc).__name__}: {exc}")
    return Message(subject=task.name, queued_at=GoTime.now(), extra=SEAL.sealed(extra))


def park(
    task: Any, task_id: str, exception: BaseException, args: Any, kwargs: Any, einfo: Any
) -> bytes:
    """Park the failed task in `celery.<its delivery queue>`. Arguments the queue
    cannot hold (not CBOR, or over `DEADLETTER_MAX_ROW_BYTES`) are replaced by a
    record of them, so the failure is still seen; such a message is not redriven."""
    msg = message_of(task, task_id, exception, args, kwargs, einfo)
    try:
        size = len(codec.encode_one(msg))
    except (codec.CodecError, TypeError, ValueError) as exc:
        msg, size = _recut(msg, f"not storable: {type(exc).__name__}: {exc}"), 0
    if size > conf.MAX_ROW_BYTES:
        msg = _recut(msg, f"{size:,} bytes, over DEADLETTER_MAX_ROW_BYTES")
    name = queue_for(msg.extra[TASK_QUEUE])
    key = queue.store_failed_msgs(name, msg)
    logger.info(
        "parked failed Celery task queue=%s key=%s name=%s id=%s",
        name,
        key.hex(),
        task.name,
        task_id,
    )
    return key


def _cut(extra: dict[str, Any], why: str) -> dict[str, Any]:
    """`extra` with the arguments replaced by a record of them (`why`, the size and
    SHA-256 of their repr, its start): the failure is seen, never redriven."""
    extra = dict(extra)
    shown = repr((extra.pop(TASK_ARGS, []), extra.pop(TASK_KWARGS, {}))).encode("utf-8", "replace")
    extra[TASK_ARGS_CUT] = {
        "Why": why,
        "Bytes": len(shown),
        "SHA256": hashlib.sha256(shown).hexdigest(),
        "Repr": shown[:LAST_ERROR_LIMIT].decode("utf-8", "ignore"),
    }
    return extra


def _recut(msg: Message, why: str) -> Message:
    """`msg` with its arguments cut (`_cut`), sealed again."""
    extra = {k: v for k, v in msg.extra.items() if k != TASK_SEAL}
    return msg.replace(extra=SEAL.sealed(_cut(extra, why)))


def _header(request: Any, name: str) -> str | None:
    value = getattr(request, name, None)
    if value is None:
        headers = getattr(request, "headers", None) or {}
        value = headers.get(name) if isinstance(headers, dict) else None
    return str(value) if value else None
