"""Many one-row queues at once, as API clients make them: for the tests that a
report's cost does not grow with the number of queues."""

from __future__ import annotations

from deadletter.models import QueuedMessage
from deadletter.wire import codec, keys
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message


def park_one_row_queues(count: int, prefix: str = "spam-") -> list[str]:
    """`count` queues named `<prefix>00000`..., one message each (one bulk insert)."""
    value = codec.encode_one(Message(subject="x", queued_at=GoTime.now()))
    names = [f"{prefix}{i:05d}" for i in range(count)]
    QueuedMessage.objects.bulk_create(
        [QueuedMessage(key=keys.new_key(name), value=value) for name in names], batch_size=500
    )
    return names
