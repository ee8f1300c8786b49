"""deadletter.contrib.arguments: a parked task's arguments as the queue reads them
back become the values the task was called with, or wait for an operator."""

from __future__ import annotations

from typing import Any

import cbor2
import pytest

from deadletter.contrib.arguments import sendable
from deadletter.exceptions import NeedsOperator
from deadletter.wire import codec
from deadletter.wire.messages import Message

BIG = [2**64, 2**200 + 7, -(2**64) - 1, -(10**40), 2**63, -(2**63)]


def read_back(value: Any) -> Any:
    """`value` as the queue reads it back from a stored message's extra key."""
    return codec.decode(codec.encode_one(Message(extra={"Args": value})))[0].extra["Args"]


def test_integers_beyond_64_bits_read_back_as_the_integers_they_were() -> None:
    stored = read_back([BIG, {"n": 2**70, "nested": [[-(2**90)]]}])

    assert sendable("t", stored) == [BIG, {"n": 2**70, "nested": [[-(2**90)]]}]


def test_the_queue_itself_gives_a_bignum_back_as_a_tag() -> None:
    assert type(read_back([2**70])[0]) is cbor2.CBORTag


def test_any_other_tag_waits_for_an_operator_naming_the_task() -> None:
    with pytest.raises(NeedsOperator, match="task billing.charge: .* CBOR tag 37"):
        sendable("billing.charge", [cbor2.CBORTag(37, b"\x00" * 16)])
