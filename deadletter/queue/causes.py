"""Failure signatures: what makes two failures "the same cause", as a pure function.

The drain records `LastError` as `ExcClass: message`; the signature keeps the
exception class and the message's words with every number, id and hex run
replaced by `#`, so "timeout after 30 s on 10.0.0.7" and "timeout after 31 s
on 10.0.0.9" group together. An HTTP status is the one number kept: a 500 and
a 503 are two causes. A value `DEADLETTER_REDACT` masks in the failed message is
masked in its signature (bare, so two addresses stay one cause): a signature is
shown to every viewer of the queue and in alerts. Kept in an indexed column
beside the row so the admin groups and filters by cause without decoding rows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from http import HTTPStatus

from deadletter.queue import redaction
from deadletter.wire.messages import Message

__all__ = ["LAST_ERROR_KEY", "MAX_SIGNATURE", "signature_at_park", "signature_of"]

MAX_SIGNATURE = 200

LAST_ERROR_KEY = "LastError"
"""The `extra` key a failure is recorded under (the drain's, the captures', a user's own)."""

# Longest first: a UUID, then hex runs with a digit (ids, hashes, addresses),
# then any number (with its decimal point or separators). Either case spelled
# out: re.IGNORECASE makes every position's test cost twice as much.
_VARIABLE = re.compile(
    r"{h}{{8}}-{h}{{4}}-{h}{{4}}-{h}{{4}}-{h}{{12}}"
    r"|\b0[xX]{h}+\b"
    r"|\b(?={h}*[0-9]){h}{{6,}}\b"
    r"|\d+(?:[.,:_-]\d+)*".format(h="[0-9a-fA-F]")
)
_SPACES = re.compile(r"\s+")
# A three-digit number from 100 to 599 is an HTTP status, kept, where the text says
# so: after "HTTP", "HTTP Error", "HTTPError:", "HTTP/1.1", "status", "status code"
# or "returned", or before its reason phrase as written ("404 Not Found", requests'
# "404 Client Error"). Looked for only around such a number, never along the text.
_STATUS_SAID_BEFORE = re.compile(
    r"\b(?:HTTP(?:Error|/\d(?:\.\d)?)?|status(?:[ _]code)?|returned)[^\w\n]{0,3}"
    r"(?:Error[^\w\n]{0,3})?$",
    re.IGNORECASE,
)
_LOOK_BEFORE = 20
_PHRASES = sorted(
    {s.phrase for s in HTTPStatus} | {"Client Error", "Server Error"}, key=len, reverse=True
)
_STATUS_SAID_AFTER = re.compile(rf" (?:{'|'.join(map(re.escape, _PHRASES))})\b")


def _folded(match: re.Match[str]) -> str:
    """`#` for a variable part; an HTTP status as it is."""
    number, text = match.group(), match.string
    if len(number) == 3 and number[0] in "12345" and number.isdigit():
        start, end = match.span()
        if _STATUS_SAID_BEFORE.search(text, max(0, start - _LOOK_BEFORE), start) or (
            _STATUS_SAID_AFTER.match(text, end)
        ):
            return number
    return "#"


def signature_of(
    last_error: object, *, queue: str | None = None, msgs: Iterable[Message] = ()
) -> str | None:
    """The cause of a recorded `LastError` text; None when there is none to group by.
    With the `queue` and the messages that failed, the values redaction masks in
    them are masked in it first (`redaction.scrubber`)."""
    if not isinstance(last_error, str) or not last_error.strip():
        return None
    if queue is not None:
        last_error = redaction.scrubber(queue, msgs, reveal=False, lengths=False)(last_error)
    text = _VARIABLE.sub(_folded, last_error)
    text = _SPACES.sub(" ", text).strip()
    if len(text) > MAX_SIGNATURE:
        text = text[: MAX_SIGNATURE - 1] + "…"
    return text


def signature_at_park(queue: str, msg: Message) -> str | None:
    """The signature column of a row `msg` is parked as in `queue`: the cause of its
    `LastError` (a capture's, or a user's own), as the drain writes it after a
    failed attempt; None without one, so a park that carries no failure costs
    one dict lookup."""
    last_error = msg.extra.get(LAST_ERROR_KEY)
    return None if last_error is None else signature_of(last_error, queue=queue, msgs=(msg,))
