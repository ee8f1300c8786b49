# Frozen for migration 0002: the key rule as the migration ran it. Never edit.
"""Row keys: `<queue name> 0x00 <8-byte big-endian ns time> <8-byte big-endian seq>`;
a key without the separator is a legacy aggregate row (a bare queue name)."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["SEPARATOR", "encode_queue_name", "is_legacy_key", "make_key", "parse_key", "queue_of"]

SEPARATOR = b"\x00"
_NUL = 0
_MAX_QUEUE_NAME_BYTES = 255
_U64 = 1 << 64
_SUFFIX_LEN = 16


class ParsedKey(NamedTuple):
    queue: str
    time_ns: int
    seq: int


def encode_queue_name(queue: str) -> bytes:
    """The UTF-8 bytes of a valid queue name; a `ValueError` naming the problem otherwise."""
    if not isinstance(queue, str):
        raise ValueError(f"queue name must be a str, got {type(queue).__name__}")
    if not queue:
        raise ValueError("queue name must not be empty")
    if "\x00" in queue:
        raise ValueError(f"queue name must not contain NUL: {queue!r}")
    try:
        raw = queue.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"queue name is not valid UTF-8: {queue!r}") from exc
    if len(raw) > _MAX_QUEUE_NAME_BYTES:
        raise ValueError(
            f"queue name is {len(raw)} UTF-8 bytes long; the limit is {_MAX_QUEUE_NAME_BYTES}"
        )
    return raw


def make_key(queue: str | bytes, time_ns: int, seq: int) -> bytes:
    prefix = queue if isinstance(queue, bytes) else encode_queue_name(queue)
    if not 0 <= time_ns < _U64 or not 0 <= seq < _U64:
        raise ValueError("key time and seq must fit in an unsigned 64-bit integer")
    return prefix + SEPARATOR + time_ns.to_bytes(8, "big") + seq.to_bytes(8, "big")


def parse_key(key: bytes) -> ParsedKey:
    """Split a per-message key; a `ValueError` for a legacy or malformed key."""
    key = bytes(key)
    sep = len(key) - _SUFFIX_LEN - 1
    if sep < 1 or key[sep] != _NUL or _NUL in key[:sep]:
        raise ValueError(f"not a per-message key: {key.hex()}")
    try:
        queue = key[:sep].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"queue name in key is not UTF-8: {key.hex()}") from exc
    return ParsedKey(
        queue,
        int.from_bytes(key[sep + 1 : sep + 9], "big"),
        int.from_bytes(key[sep + 9 :], "big"),
    )


def is_legacy_key(key: bytes) -> bool:
    """A bare queue name (no separator) is an older release's whole-queue aggregate row."""
    return _NUL not in key


def queue_of(key: bytes) -> str:
    """The queue a per-message or legacy key belongs to."""
    name, _, _ = bytes(key).partition(SEPARATOR)
    return name.decode("utf-8", errors="replace")
