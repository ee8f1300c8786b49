"""A parked task's arguments as the task is called with them again.

The queue reads a message back as the Go program wrote it and keeps every CBOR
tag as it came (`wire.codec`), so an integer beyond 64 bits, parked as CBOR's
bignum (tag 2 or 3), reads back as a `CBORTag`. `sendable` turns those back into
ints; any other tag is no value a task was called with, so the redrive waits for
an operator (`NeedsOperator`) instead of sending something else.
"""

from __future__ import annotations

from typing import Any

import cbor2

from deadletter.exceptions import NeedsOperator

__all__ = ["sendable"]

POSITIVE_BIGNUM = 2
NEGATIVE_BIGNUM = 3


def sendable(task: str, value: Any) -> Any:
    """`value` (arguments, to any depth) with bignum tags as ints; `NeedsOperator`
    naming `task` for a value no task call can carry."""
    try:
        return _plain(value)
    except RecursionError:
        raise NeedsOperator(
            f"task {task}: its arguments nest too deeply to send; nothing sent"
        ) from None
    except _Unsendable as exc:
        raise NeedsOperator(f"task {task}: {exc}; nothing sent") from None


class _Unsendable(Exception):
    pass


def _plain(value: Any) -> Any:
    kind = type(value)
    if kind is list:
        return [_plain(item) for item in value]
    if kind is dict:
        return {_plain(k): _plain(v) for k, v in value.items()}
    if kind is cbor2.CBORTag:
        if value.tag in (POSITIVE_BIGNUM, NEGATIVE_BIGNUM) and type(value.value) is bytes:
            number = int.from_bytes(value.value, "big")
            return number if value.tag == POSITIVE_BIGNUM else -1 - number
        raise _Unsendable(
            f"an argument reads back as CBOR tag {value.tag}, not a value the task was called with"
        )
    return value
