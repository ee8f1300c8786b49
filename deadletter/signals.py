"""Signals sent by the queue; receivers must not raise (a raising receiver is logged)."""

from django.dispatch import Signal

# Sent after a message row was written: sender=queue name, key=bytes, msg=Message.
message_enqueued = Signal()
# Sent after a row was deleted because its message was handled: sender=queue name, key=bytes.
message_dequeued = Signal()
# Sent when a message is thrown away: sender=queue name, key=bytes, msg=Message | None,
# reason="expired" | "corrupt" | "permanent" | "max_attempts".
message_dropped = Signal()
# Sent once per message that the age limit will drop within DEADLETTER_EXPIRY_WARNING:
# sender=queue name, key=bytes, msg=Message, expires_at=aware datetime.
message_expiring = Signal()
# Sent by the drain service (`deadletter_drain --forever`) after each pass:
# sender="deadletter", report=DrainReport. The alert rules are evaluated on it
# (connected in `DeadletterConfig.ready`); a raising receiver is logged, the
# service goes on.
drain_pass_finished = Signal()
# Sent for every alert that goes out, whatever its channels (by
# `reports.alerts.channels.send`): sender="deadletter", alert=Alert (its `kind` is
# "firing", "resolved" or "digest"; `as_json()` is what a webhook receives).
alert = Signal()
