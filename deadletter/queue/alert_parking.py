"""Alerts a channel could not take: parked in their own queue, `deadletter.alerts`,
one message per alert and channel, and sent again to that one channel by the
queue's built-in handler, `handle`, which the drain imports (`drain.handlers`).

The message holds the alert's JSON and its channel's record (`parked`: kind,
index, URL), sealed under SECRET_KEY; never a webhook's secret, which `handle`
looks up in the settings at each attempt, in the alert's queues' own `alerts`
channels first, then the other queues', then `DEADLETTER_ALERTS`'s. A webhook no
longer in the settings is a permanent failure (the message goes to the archive).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from deadletter.conf import conf
from deadletter.exceptions import NeedsOperator, PermanentFailure
from deadletter.queue import seals
from deadletter.queue.alert_channels import Channel, Webhook, rebuilt
from deadletter.queue.api import store_failed_msgs
from deadletter.queue.config import queue_configs
from deadletter.queue.history import cut
from deadletter.queue.rows import LAST_ERROR_KEY, QueueingError
from deadletter.wire.messages import Message

__all__ = [
    "ALERT_KEY",
    "CHANNEL_KEY",
    "QUEUE",
    "SEAL",
    "configured_webhook",
    "handle",
    "park",
]

logger = logging.getLogger("deadletter")

QUEUE = "deadletter.alerts"
"""The queue of alerts a channel could not take; its handler is built in."""
APP = "deadletter.reports.alerts"
# The extra keys of a parked alert (Go-style names, like Attempts and LastError).
ALERT_KEY = "Alert"
CHANNEL_KEY = "AlertChannel"
SEAL_KEY = "AlertSeal"

SEAL = seals.Seal(purpose=APP, key=SEAL_KEY, fields=(ALERT_KEY, CHANNEL_KEY))
"""Only what `send` parked is redelivered: anyone who may park a message could
otherwise have the site's webhooks sign a text of their own."""
seals.reserve(APP, (ALERT_KEY, CHANNEL_KEY, SEAL_KEY))


def park(
    data: Mapping[str, Any], index: int, channel: Channel, error: BaseException
) -> bytes | None:
    """Park the alert `data` for `channel`, number `index` of its list, `error` as
    its `LastError`; returns the key, or None (logged) when the queue cannot take it."""
    record = channel.parked(index)
    extra = SEAL.sealed({ALERT_KEY: dict(data), CHANNEL_KEY: record})
    extra[LAST_ERROR_KEY] = cut(f"{type(error).__name__}: {error}")
    msg = Message(subject=str(data.get("title", "")), extra=extra)
    try:
        return store_failed_msgs(QUEUE, msg)
    except QueueingError as exc:
        logger.error("alert lost: not parked in %s channel=%s error=%s", QUEUE, record, exc)
        return None


def handle(msg: Message) -> None:
    """Send the parked alert `msg` to its channel again; raises when that fails, so
    the drain's attempts, backoff and breaker apply. The `alert` signal is not sent
    again: `send` sent it when the alert fired."""
    SEAL.require(msg.extra, "nothing sent")
    data = msg.extra.get(ALERT_KEY)
    record = msg.extra.get(CHANNEL_KEY)
    if not isinstance(data, dict) or not isinstance(record, dict):
        raise NeedsOperator(f"refused to redeliver: {ALERT_KEY} or {CHANNEL_KEY} is not a map")
    channel = rebuilt(record, _configured_channels(_queues_of(data)))
    if channel is None:
        raise PermanentFailure(
            f"the webhook {record.get('url')} is no longer in DEADLETTER_ALERTS or a "
            "queue's alerts channels: its secret is unknown, nothing sent"
        )
    channel.send(data)


def configured_webhook(url: Any, queues: Sequence[str] = ()) -> Webhook | None:
    """The sound webhook channel of the settings with this `url`: in the `alerts`
    channels of `queues` first, then of the other queues, then in
    `DEADLETTER_ALERTS`'s; None when there is none."""
    return Webhook.rebuilt({"url": url}, _configured_channels(queues))


def _queues_of(data: Mapping[str, Any]) -> list[str]:
    """The alert's queue, then its items' (a digest has none of its own)."""
    items = data.get("items")
    found = [data.get("queue")]
    if isinstance(items, list):
        found += [item.get("queue") for item in items if isinstance(item, dict)]
    return [q for q in dict.fromkeys(found) if isinstance(q, str) and q]


def _configured_channels(queues: Sequence[str]) -> Iterator[Any]:
    configs = {config.name: config for config in queue_configs()}
    names = [*(q for q in queues if q in configs), *(q for q in configs if q not in queues)]
    for rules in (*(configs[name].alerts for name in names), conf.ALERTS):
        channels = rules.get("channels") if isinstance(rules, dict) else None
        if isinstance(channels, list | tuple):
            yield from channels
