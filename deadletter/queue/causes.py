"""Failure signatures: what makes two failures "the same cause", as a pure function.

The drain records `LastError` as `ExcClass: message`; the signature keeps the
exception class and the message's words with every number, id and hex run
replaced by `#`, so "timeout after 30 s on 10.0.0.7" and "timeout after 31 s
on 10.0.0.9" group together. An HTTP status is the one number kept: a 500 and
a 503 are two causes. Kept in an indexed column beside the row so the admin
groups and filters by cause without decoding rows. No Django here.
"""

from __future__ import annotations

import re
from http import HTTPStatus

from deadletter.wire.messages import Message

__all__ = ["LAST_ERROR_KEY", "MAX_SIGNATURE", "signature_at_park", "signature_of"]

MAX_SIGNATURE = 200

LAST_ERROR_KEY = "LastError"
"""The `extra` key a failure is recorded under (the drain's, the captures', a user's own)."""

# An HTTP status (100-599) where the text says it is one: after "HTTP", "HTTP Error",
# "HTTPError:", "HTTP/1.1", "status", "status code" or "returned", or before its
# reason phrase as written ("404 Not Found", requests' "404 Client Error"). Kept.
_PHRASES = "|".join(
    sorted(
        {re.escape(s.phrase) for s in HTTPStatus} | {"Client Error", "Server Error"},
        key=len,
        reverse=True,
    )
)
_STATUS = (
    r"\b(?:HTTP(?:Error|/\d(?:\.\d)?)?|status(?:[ _]code)?|returned)[^\w\n]{0,3}"
    r"(?:Error[^\w\n]{0,3})?[1-5]\d\d\b(?![.:]\d)"
    rf"|\b[1-5]\d\d (?-i:{_PHRASES})\b"
)
# Longest first: a status (kept), a UUID, then hex runs with a digit (ids, hashes,
# addresses), then any number (with its decimal point or separators).
_VARIABLE = re.compile(
    rf"(?P<status>{_STATUS})"
    r"|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    r"|\b0x[0-9a-f]+\b"
    r"|\b(?=[0-9a-f]*[0-9])[0-9a-f]{6,}\b"
    r"|\d+(?:[.,:_-]\d+)*",
    re.IGNORECASE,
)
_SPACES = re.compile(r"\s+")


def _folded(match: re.Match[str]) -> str:
    return match.group() if match.group("status") else "#"


def signature_of(last_error: object) -> str | None:
    """The cause of a recorded `LastError` text; None when there is none to group by."""
    if not isinstance(last_error, str) or not last_error.strip():
        return None
    text = _VARIABLE.sub(_folded, last_error)
    text = _SPACES.sub(" ", text).strip()
    if len(text) > MAX_SIGNATURE:
        text = text[: MAX_SIGNATURE - 1] + "…"
    return text


def signature_at_park(msg: Message) -> str | None:
    """The signature column of a row `msg` is parked as: the cause of its
    `LastError` (a capture's, or a user's own), as the drain writes it after a
    failed attempt; None without one, so a park that carries no failure costs
    one dict lookup."""
    last_error = msg.extra.get(LAST_ERROR_KEY)
    return None if last_error is None else signature_of(last_error)
