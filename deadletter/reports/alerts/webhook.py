"""The signature check under the path receivers import it by
(docs/alert-channels.md); the transport lives in `queue.webhooks`, below the
channels that post."""

from __future__ import annotations

from deadletter.queue.webhooks import SIGNATURE_HEADER, TIMESTAMP_HEADER, verify

__all__ = ["SIGNATURE_HEADER", "TIMESTAMP_HEADER", "verify"]
