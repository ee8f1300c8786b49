"""Demo handlers named by the demo settings' `DEADLETTER_HANDLERS`.

`post_to_local_endpoint` redelivers a webhook to `DEMO_WEBHOOK_URL` (the demo
site's own `/demo/webhook/` by default): with `./dev serve` running, a drain
delivers; with nothing listening it raises, and the message stays parked
with its attempt count raised — both worth seeing once.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from django.conf import settings

from deadletter import PermanentFailure
from deadletter.wire.messages import Message

logger = logging.getLogger("deadletter")

DEFAULT_WEBHOOK_URL = "http://127.0.0.1:8000/demo/webhook/"
TIMEOUT = 5.0


def as_json(msg: Message) -> dict[str, Any]:
    return {
        "timestamp": str(msg.timestamp) if msg.timestamp else None,
        "queued_at": str(msg.queued_at) if msg.queued_at else None,
        "username": msg.username,
        "subject": msg.subject,
        "descriptions": msg.descriptions,
        "fields": msg.fields,
        "code": int(msg.code),
    }


def post_to_local_endpoint(msg: Message) -> None:
    """POST the message as JSON; a 2xx is delivered, a 4xx other than 408/429
    can never succeed (dropped), anything else raises and the message stays."""
    url = getattr(settings, "DEMO_WEBHOOK_URL", DEFAULT_WEBHOOK_URL)
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise PermanentFailure(f"DEMO_WEBHOOK_URL must be http(s), got {url!r}")
    request = urllib.request.Request(  # noqa: S310  (scheme checked above)
        url,
        data=json.dumps(as_json(msg)).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:  # noqa: S310
            status = response.status
    except urllib.error.HTTPError as exc:
        if 400 <= exc.code < 500 and exc.code not in (408, 429):
            raise PermanentFailure(f"{url} refused the message: HTTP {exc.code}") from exc
        raise
    logger.info("demo webhook delivered url=%s status=%s subject=%s", url, status, msg.subject)


def log_only(msg: Message) -> None:
    """Stands in for a chat API: logs the message and calls it delivered."""
    logger.info("demo delivery user=%s subject=%s", msg.username, msg.subject)
