"""The built-in handler of `deadletter.alerts`: an alert a channel could not take,
sent again to that one channel. The drain knows it without the project naming it
(`drain.handlers.BUILTIN_HANDLERS`); a project's own entry for the queue wins.

The parked message names its webhook by URL (and its index in the list it came
from), not by secret: the secret is looked up in the settings at each attempt, in
the queue's own `alerts` channels first, then in `DEADLETTER_ALERTS`'s. A webhook
no longer in the settings is a permanent failure (the message goes to the archive).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from deadletter.conf import conf
from deadletter.exceptions import NeedsOperator, PermanentFailure
from deadletter.queue.alert_channels import MAIL_ADMINS, WEBHOOK, channel_problems
from deadletter.queue.config import queue_configs
from deadletter.reports.alerts.channels import ALERT_KEY, CHANNEL_KEY, SEAL, Channel, deliver
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
    deliver(data, _spec(channel, data))


def _spec(channel: Mapping[str, Any], data: Mapping[str, Any]) -> Channel:
    if channel.get("kind") == MAIL_ADMINS:
        return MAIL_ADMINS
    url = channel.get("url")
    spec = configured_webhook(url, _queues_of(data))
    if spec is None:
        raise PermanentFailure(
            f"the webhook {url} is no longer in DEADLETTER_ALERTS or a queue's alerts "
            "channels: its secret is unknown, nothing sent"
        )
    return spec


def _queues_of(data: Mapping[str, Any]) -> list[str]:
    """The alert's queue, then its items' (a digest has none of its own)."""
    items = data.get("items")
    found = [data.get("queue")]
    if isinstance(items, list):
        found += [item.get("queue") for item in items if isinstance(item, Mapping)]
    return [q for q in dict.fromkeys(found) if isinstance(q, str) and q]


def configured_webhook(url: Any, queues: Sequence[str] = ()) -> Mapping[str, str] | None:
    """The valid webhook channel of the settings with this `url`: in the `alerts`
    channels of `queues` first, then of the other queues, then in
    `DEADLETTER_ALERTS`'s; None when there is none."""
    for spec in _configured_channels(queues):
        if isinstance(spec, Mapping) and spec.get(WEBHOOK) == url and not channel_problems(spec):
            return spec
    return None


def _configured_channels(queues: Sequence[str]) -> Iterator[Any]:
    configs = {config.name: config for config in queue_configs()}
    names = [*(q for q in queues if q in configs), *(q for q in configs if q not in queues)]
    for rules in (*(configs[name].alerts for name in names), conf.ALERTS):
        channels = rules.get("channels") if isinstance(rules, Mapping) else None
        if isinstance(channels, list | tuple):
            yield from channels
