"""A webhook channel's transport: an alert POSTed as JSON, signed so that a
receiver can tell it came from this site and was not replayed.

The signature is `v1=` and the hex HMAC-SHA256, under the channel's secret, of
`<timestamp>.<body>`: the timestamp (Unix seconds, also sent in its own header)
is signed with the body, so an old request sent again is refused by its age and
a fresh timestamp on an old body breaks the signature. `verify` is the check a
receiver runs; it needs nothing but the standard library.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from deadletter.exceptions import DeadletterError

__all__ = [
    "SIGNATURE_HEADER",
    "TIMEOUT",
    "TIMESTAMP_HEADER",
    "TOLERANCE",
    "WebhookFailed",
    "post",
    "sign",
    "url_problem",
    "verify",
]

TIMESTAMP_HEADER = "Deadletter-Timestamp"
SIGNATURE_HEADER = "Deadletter-Signature"
TIMEOUT = 5.0
"""Seconds a POST may take, connecting and answering: an evaluator sends alerts in
turn, and a receiver that hangs must not hold up the others for long."""
TOLERANCE = 300
"""Seconds either way a receiver accepts a timestamp by default: wide enough for
clocks a little apart, narrow enough that a captured request soon stops working."""
_VERSION = "v1"


class WebhookFailed(DeadletterError):
    """A POST that did not get a 2xx answer (an HTTP status, a refused or timed-out
    connection, a redirect); the text names the URL and what happened."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is a failure: urllib would follow a 301-303 as a GET without the
    body, and a 2xx from wherever it led would pass for a delivery."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_opener = urllib.request.build_opener(_NoRedirect)


def sign(body: bytes, timestamp: str, secret: str) -> str:
    """The `Deadletter-Signature` of `body` sent at `timestamp` under `secret`."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return f"{_VERSION}={mac.hexdigest()}"


def verify(
    body: bytes,
    timestamp: str,
    signature: str,
    secret: str,
    *,
    tolerance: float = TOLERANCE,
    now: float | None = None,
) -> bool:
    """Whether a request's raw `body`, its `Deadletter-Timestamp` and its
    `Deadletter-Signature` headers were signed under `secret` no more than
    `tolerance` seconds from `now` (the clock when None). The comparison takes
    the same time whatever the signature, so it leaks nothing of the right one."""
    if not (isinstance(timestamp, str) and timestamp.isascii() and timestamp.isdigit()):
        return False
    current = time.time() if now is None else now
    if abs(current - int(timestamp)) > tolerance:
        return False
    if not isinstance(signature, str):
        return False
    expected = sign(body, timestamp, secret).encode()
    return hmac.compare_digest(expected, signature.encode("utf-8", "replace"))


def post(
    url: str,
    body: bytes,
    secret: str,
    *,
    timeout: float = TIMEOUT,
    now: float | None = None,
) -> int:
    """POST `body` (JSON) to `url`, signed under `secret` at `now` (the clock when
    None); returns the 2xx status, else raises `WebhookFailed`."""
    problem = url_problem(url, "a webhook's URL")
    if problem is not None:
        raise WebhookFailed(problem)
    timestamp = str(int(time.time() if now is None else now))
    request = urllib.request.Request(  # noqa: S310 (url_problem: http and https only)
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": "deadletter-alerts",
            TIMESTAMP_HEADER: timestamp,
            SIGNATURE_HEADER: sign(body, timestamp, secret),
        },
    )
    try:
        with _opener.open(request, timeout=timeout) as response:
            status = int(response.status)
    except urllib.error.HTTPError as exc:
        raise WebhookFailed(f"{url} answered HTTP {exc.code}") from None
    except urllib.error.URLError as exc:
        raise WebhookFailed(f"{url} could not be reached: {exc.reason}") from None
    except (OSError, http.client.HTTPException) as exc:
        raise WebhookFailed(f"{url} failed: {type(exc).__name__}: {exc}") from None
    if not 200 <= status < 300:
        raise WebhookFailed(f"{url} answered HTTP {status}")
    return status


def url_problem(url: Any, where: str) -> str | None:
    """What keeps `url` (named `where`) from being a webhook's address, an absolute
    http or https URL with a host, or None; urllib alone would also open `file:`."""
    try:
        parts = urlsplit(url) if isinstance(url, str) else None
    except ValueError:  # a bracketed host that is not an IP address
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{where} must be an http(s):// URL, got {url!r}"
    return None
