"""The built-in handler of `deadletter.alerts` under the path projects name it by
in `DEADLETTER_HANDLERS` (docs/alert-channels.md); it lives in
`queue.alert_parking`, where the drain imports it."""

from __future__ import annotations

from deadletter.queue.alert_parking import configured_webhook, handle

__all__ = ["configured_webhook", "handle"]
