"""`inflight.in_hand`: a key is held while a live process's journal has it in a slot
(this process's own included), and no longer once the slot is cleared."""

from __future__ import annotations

import pytest

from deadletter.drain import inflight

pytestmark = pytest.mark.django_db


def test_a_key_is_in_hand_while_its_handler_is_journaled() -> None:
    journal = inflight.journal()
    if journal is None:
        pytest.skip("no journal for an in-memory database")
    key, other = b"q\x00" + bytes(16), b"q\x00" + bytes(15) + b"\x01"
    assert not inflight.in_hand(key)
    slot = journal.enter(key, b"drain")
    try:
        assert inflight.in_hand(key)
        assert not inflight.in_hand(other)
    finally:
        journal.leave(slot)
    assert not inflight.in_hand(key)
