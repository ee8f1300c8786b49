"""Rows another writer may leave in the queue table that this app never writes
itself; the admin and API tests walk each through every page that shows it."""

from __future__ import annotations

from django.db import connection

from deadletter.models import KEY_BYTES
from deadletter.wire import keys
from tests.factories import insert


def park_odd_rows(queue: str = "q") -> list[bytes]:
    """Write the odd rows with raw SQL (the ORM would not hold some of them back)
    and return their keys."""
    # Longer than any key the app writes where the column takes any length; on
    # MySQL/MariaDB, the longest the column holds, with an odd 270-byte suffix.
    tail = KEY_BYTES - len(queue.encode()) - 1 if connection.vendor == "mysql" else 400
    odd = {
        queue.encode() + b"\x00" + b"\x01" * tail: b"\xa0",
        b"legacy-queue": b"\x80",  # no separator: an older release's aggregate row
        b"\xff\xfe\x00" + b"\x02" * 16: b"corrupted cbor data",  # name not UTF-8, value corrupt
        keys.new_key(queue): b"",
        keys.new_key(queue): b"\xd9\xd9\xf7" * 1000 + b"\x81\xa0",  # tags before a message
    }
    for key, value in odd.items():
        insert(key, value)
    return list(odd)
