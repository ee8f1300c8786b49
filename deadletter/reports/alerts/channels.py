"""Where alerts go: each channel of a rule (`queue.alert_channels`: Django's
`mail_admins`, signed webhooks), then the `deadletter.signals.alert` signal, which
is sent for every alert whatever the channels did.

An alert a channel could not take is parked in its own queue, `deadletter.alerts`,
and the drain retries it like any dead letter (`queue.alert_parking`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from deadletter import signals
from deadletter.queue.alert_channels import BadChannel, channel_name, channel_of, mail_parts
from deadletter.queue.alert_parking import ALERT_KEY, CHANNEL_KEY, QUEUE, SEAL, park
from deadletter.reports.alerts.alert import Alert

__all__ = [
    "ALERT_KEY",
    "CHANNEL_KEY",
    "QUEUE",
    "SEAL",
    "channel_name",
    "mail_parts",
    "send",
]

logger = logging.getLogger("deadletter")


def send(alert: Alert, channels: Sequence[Any]) -> list[str]:
    """Send `alert` to each of `channels` (specs as the settings give them), then
    the `alert` signal; returns the channels that failed (`channel_name`). Each
    failure is logged, and parked in `deadletter.alerts` for the drain to retry,
    unless the spec itself is wrong (each problem logged as an error, in the words
    of `manage.py check`: a retry could never succeed). Never raises for a channel."""
    data = alert.as_json()
    failed = []
    for index, spec in enumerate(channels):
        try:
            channel = channel_of(spec, f"channels[{index}]")
        except BadChannel as exc:
            for problem in exc.problems:
                logger.error(
                    "alert not sent rule=%s queue=%s: %s", alert.rule, alert.queue, problem
                )
            failed.append(channel_name(spec))
            continue
        try:
            channel.send(data)
        except Exception as exc:  # a mail backend may raise anything; the others still go
            logger.warning(
                "alert not sent rule=%s queue=%s channel=%s error=%s",
                alert.rule,
                alert.queue,
                channel.name,
                exc,
            )
            park(data, index, channel, exc)
            failed.append(channel.name)
    _send_signal(alert)
    return failed


def _send_signal(alert: Alert) -> None:
    for receiver, result in signals.alert.send_robust(sender="deadletter", alert=alert):
        if isinstance(result, Exception):
            logger.error("signal receiver failed receiver=%r error=%r", receiver, result)
