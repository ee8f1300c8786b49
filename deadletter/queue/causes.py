"""Failure signatures: what makes two failures "the same cause", as a pure function.

The drain records `LastError` as `ExcClass: message`; the signature keeps the
exception class and the message's words with every number, id and hex run
replaced by `#`, so "timeout after 30 s on 10.0.0.7" and "timeout after 31 s
on 10.0.0.9" group together. Kept in an indexed column beside the row so the
admin groups and filters by cause without decoding rows. No Django here.
"""

from __future__ import annotations

import re

__all__ = ["MAX_SIGNATURE", "signature_of"]

MAX_SIGNATURE = 200

# Longest first: a UUID, then hex runs with a digit (ids, hashes, addresses),
# then any number (with its decimal point or separators).
_VARIABLE = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    r"|\b0x[0-9a-f]+\b"
    r"|\b(?=[0-9a-f]*[0-9])[0-9a-f]{6,}\b"
    r"|\d+(?:[.,:_-]\d+)*",
    re.IGNORECASE,
)
_SPACES = re.compile(r"\s+")


def signature_of(last_error: object) -> str | None:
    """The cause of a recorded `LastError` text; None when there is none to group by."""
    if not isinstance(last_error, str) or not last_error.strip():
        return None
    text = _VARIABLE.sub("#", last_error)
    text = _SPACES.sub(" ", text).strip()
    if len(text) > MAX_SIGNATURE:
        text = text[: MAX_SIGNATURE - 1] + "…"
    return text
