"""The built-in handler of `deadletter.alerts`: an alert a channel could not take,
sent again to that one channel. The drain knows it without the project naming it
(`drain.handlers.BUILTIN_HANDLERS`); a project's own entry for the queue wins.

The parked message names its webhook by URL (and its index in the list it came
from), not by secret: the secret is looked up in the settings at each attempt, in
the queue's own `alerts` channels first, then in `DEADLETTER_ALERTS`'s. A webhook
no longer in the settings is a permanent failure (the message goes to the archive).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from deadletter.conf import conf
from deadletter.exceptions import NeedsOperator, PermanentFailure
from deadletter.reports.alerts.channels import (
    ALERT_KEY,
    CHANNEL_KEY,
    MAIL_ADMINS,
    SEAL,
    WEBHOOK,
    Channel,
    channel_problem,
    deliver,
)
from deadletter.wire.messages import Message

__all__ = ["configured_webhook", "handle"]


def handle(msg: Message) -> None:
    """Send the parked alert `msg` to its channel again; raises when that fails, so
    the drain's attempts, backoff and breaker apply. The `alert` signal is not sent
    again: `send` sent it when the alert fired."""
    SEAL.require(msg.extra, "nothing sent")
    data = msg.extra.get(ALERT_KEY)
    channel = msg.extra.get(CHANNEL_KEY)
    if not isinstance(data, Mapping) or not isinstance(channel, Mapping):
        raise NeedsOperator(f"refused to redeliver: {ALERT_KEY} or {CHANNEL_KEY} is not a map")
    deliver(data, _spec(channel, data.get("queue")))


def _spec(channel: Mapping[str, Any], queue: Any) -> Channel:
    if channel.get("kind") == MAIL_ADMINS:
        return MAIL_ADMINS
    url = channel.get("url")
    spec = configured_webhook(url, queue if isinstance(queue, str) else None)
    if spec is None:
        raise PermanentFailure(
            f"the webhook {url} is no longer in DEADLETTER_ALERTS or its queue's alerts "
            "channels: its secret is unknown, nothing sent"
        )
    return spec


def configured_webhook(url: Any, queue: str | None = None) -> Mapping[str, str] | None:
    """The valid webhook channel of the settings with this `url`: in `queue`'s own
    `alerts` channels first, then in `DEADLETTER_ALERTS`'s; None when there is none."""
    for spec in _configured_channels(queue):
        if isinstance(spec, Mapping) and spec.get(WEBHOOK) == url and channel_problem(spec) is None:
            return spec
    return None


def _configured_channels(queue: str | None) -> Iterator[Any]:
    handlers = conf.HANDLERS
    policy = handlers.get(queue) if queue is not None and isinstance(handlers, Mapping) else None
    alerts = policy.get("alerts") if isinstance(policy, Mapping) else None
    for rules in (alerts, conf.ALERTS):
        channels = rules.get("channels") if isinstance(rules, Mapping) else None
        if isinstance(channels, list | tuple):
            yield from channels
