"""Where alerts go: Django's `mail_admins`, signed webhooks, and the
`deadletter.signals.alert` signal, which is sent for every alert whatever the
channels did.

An alert a channel could not take is parked in its own queue, `deadletter.alerts`,
one message per alert and channel, and the drain retries it like any dead letter
(`redeliver.handle`, the queue's built-in handler). The message holds the alert's
JSON and which channel it is for (kind, index, URL), sealed under SECRET_KEY; never
a webhook's secret, which the redelivery reads from the settings again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from django.core.mail import mail_admins

from deadletter import signals
from deadletter.queue import seals, store_failed_msgs
from deadletter.queue.alert_channels import MAIL_ADMINS, WEBHOOK, channel_problems
from deadletter.queue.history import cut
from deadletter.queue.rows import LAST_ERROR_KEY, QueueingError
from deadletter.reports.alerts import webhook
from deadletter.reports.alerts.alert import Alert
from deadletter.wire.messages import Message

__all__ = [
    "ALERT_KEY",
    "CHANNEL_KEY",
    "QUEUE",
    "SEAL",
    "channel_name",
    "deliver",
    "mail_parts",
    "send",
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

Channel = str | Mapping[str, str]


def channel_name(spec: Channel) -> str:
    """How `send` names a channel it could not send to: `mail_admins`, or the
    webhook's URL (never its secret)."""
    if isinstance(spec, Mapping):
        return str(spec.get(WEBHOOK))
    return str(spec)


def mail_parts(data: Mapping[str, Any]) -> tuple[str, str]:
    """The subject and body of an alert's mail, from its JSON (`Alert.as_json`):
    its title; its text, the link and the figures."""
    subject = " ".join(str(data.get("title", "")).split())
    lines = [str(data.get("text", "")).rstrip(), "", str(data.get("link", ""))]
    figures = data.get("figures") or {}
    if isinstance(figures, Mapping) and figures:
        lines += ["", *(f"{name}: {value}" for name, value in figures.items())]
    return subject, "\n".join(lines) + "\n"


def deliver(data: Mapping[str, Any], spec: Channel) -> None:
    """Send an alert's JSON to one valid channel; raises whatever stopped it
    (`webhook.WebhookFailed`, the mail backend's error)."""
    if isinstance(spec, Mapping):
        webhook.post(spec[WEBHOOK], json.dumps(data).encode(), spec["secret"])
        return
    subject, text = mail_parts(data)
    mail_admins(subject, text, fail_silently=False)


def send(alert: Alert, channels: Sequence[Channel]) -> list[str]:
    """Send `alert` to each of `channels`, then the `alert` signal; returns the
    channels that failed (`channel_name`). Each failure is logged, and parked in
    `deadletter.alerts` for the drain to retry, unless the spec itself is wrong
    (each problem logged as an error, in the words of `manage.py check`: a retry
    could never succeed). Never raises for a channel."""
    data = alert.as_json()
    failed = []
    for index, spec in enumerate(channels):
        problems = channel_problems(spec, f"channels[{index}]")
        for problem in problems:
            logger.error("alert not sent rule=%s queue=%s: %s", alert.rule, alert.queue, problem)
        if problems:
            failed.append(channel_name(spec) if isinstance(spec, str | Mapping) else repr(spec))
            continue
        try:
            deliver(data, spec)
        except Exception as exc:  # a mail backend may raise anything; the others still go
            name = channel_name(spec)
            logger.warning(
                "alert not sent rule=%s queue=%s channel=%s error=%s",
                alert.rule,
                alert.queue,
                name,
                exc,
            )
            park(data, index, spec, exc)
            failed.append(name)
    _send_signal(alert)
    return failed


def park(data: Mapping[str, Any], index: int, spec: Channel, error: BaseException) -> bytes | None:
    """Park the alert `data` for channel number `index` of its list, `error` as its
    `LastError`; returns the key, or None (logged) when the queue cannot take it."""
    channel: dict[str, Any] = {"kind": MAIL_ADMINS, "index": index}
    if isinstance(spec, Mapping):
        channel = {"kind": WEBHOOK, "index": index, "url": spec[WEBHOOK]}
    extra = SEAL.sealed({ALERT_KEY: dict(data), CHANNEL_KEY: channel})
    extra[LAST_ERROR_KEY] = cut(f"{type(error).__name__}: {error}")
    msg = Message(subject=str(data.get("title", "")), extra=extra)
    try:
        return store_failed_msgs(QUEUE, msg)
    except QueueingError as exc:
        logger.error("alert lost: not parked in %s channel=%s error=%s", QUEUE, channel, exc)
        return None


def _send_signal(alert: Alert) -> None:
    for receiver, result in signals.alert.send_robust(sender="deadletter", alert=alert):
        if isinstance(result, Exception):
            logger.error("signal receiver failed receiver=%r error=%r", receiver, result)
