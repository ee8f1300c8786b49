"""Row keys: `<queue name> 0x00 <8-byte big-endian ns time> <8-byte big-endian seq>`.

The key alone orders a queue (by time, then seq) and bounds it (one
contiguous range of the primary-key index), so no other column is needed to
list, count or page a queue. Pure: no Django here.
"""

from __future__ import annotations

import os
import secrets
import struct
import threading
import time
from datetime import datetime
from typing import NamedTuple

from deadletter.wire import gotime

__all__ = [
    "MAX_QUEUE_NAME_BYTES",
    "ParsedKey",
    "SEPARATOR",
    "KeyGenerator",
    "encode_queue_name",
    "from_text",
    "is_legacy_key",
    "key_from_int",
    "key_to_int",
    "make_key",
    "message_bounds",
    "new_key",
    "parse_key",
    "prefix_of",
    "queue_bounds",
    "queue_of",
    "to_text",
    "written_at",
]

SEPARATOR = b"\x00"
# The separator as the int `bytes` hold: `NUL in key` with a bytes operand
# first tries the operand as an int and builds a TypeError (0.6 us a call);
# with this it is a plain byte search.
NUL = 0
MAX_QUEUE_NAME_BYTES = 255
_U64 = 1 << 64
_SUFFIX_LEN = 16
_SEQ_STRIDE = 1 << 16
_TIME_AND_SEQ = struct.Struct(">QQ").pack


class ParsedKey(NamedTuple):
    queue: str
    time_ns: int
    seq: int


def encode_queue_name(queue: str) -> bytes:
    """The UTF-8 bytes of a valid queue name; a `ValueError` naming the problem otherwise."""
    if type(queue) is str:
        known = _known_names.get(queue)
        if known is not None:
            return known
    raw = _checked_name(queue)
    if type(queue) is str:
        if len(_known_names) >= _KNOWN_NAMES_LIMIT:
            _known_names.clear()
        _known_names[queue] = raw
    return raw


# A process names few queues, each on every store and read: checked once.
_known_names: dict[str, bytes] = {}
_KNOWN_NAMES_LIMIT = 1024


def _checked_name(queue: str) -> bytes:
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
    if len(raw) > MAX_QUEUE_NAME_BYTES:
        raise ValueError(
            f"queue name is {len(raw)} UTF-8 bytes long; the limit is {MAX_QUEUE_NAME_BYTES}"
        )
    return raw


def make_key(queue: str | bytes, time_ns: int, seq: int) -> bytes:
    prefix = queue if isinstance(queue, bytes) else encode_queue_name(queue)
    if not 0 <= time_ns < _U64 or not 0 <= seq < _U64:
        raise ValueError("key time and seq must fit in an unsigned 64-bit integer")
    return prefix + SEPARATOR + _TIME_AND_SEQ(time_ns, seq)


def parse_key(key: bytes) -> ParsedKey:
    """Split a per-message key; a `ValueError` for a legacy or malformed key."""
    key = bytes(key)
    sep = len(key) - _SUFFIX_LEN - 1
    if sep < 1 or key[sep] != NUL or NUL in key[:sep]:
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
    return NUL not in key


def prefix_of(key: bytes) -> bytes:
    """The encoded name of the queue a per-message or legacy key belongs to."""
    return bytes(key).partition(SEPARATOR)[0]


def queue_of(key: bytes) -> str:
    """The queue a per-message or legacy key belongs to."""
    return prefix_of(key).decode("utf-8", errors="replace")


def queue_bounds(queue: str) -> tuple[bytes, bytes]:
    """`[low, high)` covering the queue's legacy row and every per-message row.

    The legacy key is the bare name, which sorts just before `name 0x00`, so
    one range scan from `name` sees both.
    """
    raw = encode_queue_name(queue)
    return raw, raw + b"\x01"


def message_bounds(queue: str) -> tuple[bytes, bytes]:
    """`[low, high)` of the per-message rows only."""
    raw = encode_queue_name(queue)
    return raw + SEPARATOR, raw + b"\x01"


def key_to_int(key: bytes) -> int:
    """The 128-bit (time, seq) suffix as one integer, for finding room between two keys."""
    return int.from_bytes(key[-_SUFFIX_LEN:], "big")


def key_from_int(prefix: bytes, value: int) -> bytes:
    return prefix + SEPARATOR + value.to_bytes(_SUFFIX_LEN, "big")


class KeyGenerator:
    """Issues keys that never go backwards in this process.

    The time is the wall clock, held at its last value if the clock steps
    back; the seq is a per-process counter from a random start, so two
    processes issuing a key in the same nanosecond still differ. The counter
    steps by 2**16, leaving room after every key for the rows a multi-message
    row is split into. A collision is possible only in theory and the caller
    retries with a fresh key.
    """

    def __init__(self) -> None:
        self._reset()
        # A forked child must not continue its parent's counter (both would
        # issue the same keys); asking `getpid` on every key costs a syscall.
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        # New in a forked child too: the parent's lock may have been held at the fork.
        self._lock = threading.Lock()
        self._last_ns = 0
        self._seq = secrets.randbelow(1 << 62)

    def next(self, queue: str | bytes, now_ns: int | None = None) -> bytes:
        with self._lock:
            now = time.time_ns() if now_ns is None else now_ns
            if now > self._last_ns:
                self._last_ns = now
            self._seq = seq = (self._seq + _SEQ_STRIDE) % _U64
            last = self._last_ns
        return make_key(queue, last, seq)


_generator = KeyGenerator()


def new_key(queue: str | bytes, now_ns: int | None = None) -> bytes:
    """A fresh key for `queue` from the process-wide generator."""
    return _generator.next(queue, now_ns)


def to_text(key: bytes) -> str:
    """The one text form of a key in URLs (admin, API): lowercase hex."""
    return bytes(key).hex()


# The longest key `from_text` reads: far past any key this app writes (a name of
# `MAX_QUEUE_NAME_BYTES` and 17 bytes), so a row another writer left under a
# longer key can still be opened and deleted, while a URL stays bounded.
MAX_ADDRESSABLE_KEY_BYTES = 4096


def from_text(text: str) -> bytes:
    """Parse `to_text` (either case, nothing else: no spaces, no prefix); the one
    reader of a key's text, for URLs, forms, lookups and files alike. A
    `ValueError` for anything that is not a key's hex."""
    if (
        not text
        or len(text) % 2
        or len(text) > 2 * MAX_ADDRESSABLE_KEY_BYTES
        or not _HEX_DIGITS.issuperset(text)
    ):
        raise ValueError(f"not a key in hex: {text[:80]!r}")
    return bytes.fromhex(text)


_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


def written_at(key: bytes) -> datetime | None:
    """When a per-message row was written, from its key, to the microsecond; None
    for a legacy or malformed key."""
    try:
        parsed = parse_key(key)
    except ValueError:
        return None
    return gotime.utc_datetime(parsed.time_ns)
