"""Limits past 64 bits read through the C speed-up as the Python code reads them:
the C reading compares in 64 bits, so what reaches it is held to them
(`codec.read_rows`), and a fetch or a drain never raises `OverflowError`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from deadletter.drain import Drainer
from deadletter.queue import Queued, fetch_failed_msgs, store_failed_msgs
from deadletter.wire import codec, keys
from deadletter.wire.messages import Message
from tests.wire.test_speedups import _import_speedups

pytestmark = pytest.mark.django_db(transaction=True)

# Past the 64-bit nanoseconds the C cutoff (now - age) holds, and past its row size.
HUGE_AGE = timedelta(days=130_000)
HUGE_ROW_LIMIT = 2**63

delivered: list[str] = []


def handler(msg: Message) -> None:
    delivered.append(msg.subject)


@pytest.fixture(autouse=True)
def speedups() -> None:
    _import_speedups()
    assert codec.read_rows is not None


def park(subject: str) -> bytes:
    return store_failed_msgs("q", Message(subject=subject, queued_at=datetime.now(UTC)))


@pytest.mark.parametrize(
    ("setting", "value"),
    [("DEADLETTER_MAX_QUEUE_AGE", HUGE_AGE), ("DEADLETTER_MAX_ROW_BYTES", HUGE_ROW_LIMIT)],
)
def test_a_fetch_under_a_limit_past_64_bits_reads_what_the_python_code_reads(
    settings: Any, setting: str, value: object
) -> None:
    setattr(settings, setting, value)
    park("one")
    park("two")
    read = [q.msg.subject for q in fetch_failed_msgs("q")]
    with codec.python_only():
        assert read == [q.msg.subject for q in fetch_failed_msgs("q")] == ["one", "two"]


@pytest.mark.parametrize(
    ("setting", "value"),
    [("DEADLETTER_MAX_QUEUE_AGE", HUGE_AGE), ("DEADLETTER_MAX_ROW_BYTES", HUGE_ROW_LIMIT)],
)
def test_a_drain_under_a_limit_past_64_bits_delivers(
    settings: Any, setting: str, value: object
) -> None:
    setattr(settings, setting, value)
    settings.DEADLETTER_HANDLERS = {"q": "tests.wire.test_speedups_limits.handler"}
    delivered.clear()
    park("one")
    Drainer().run()
    assert delivered == ["one"]
    assert fetch_failed_msgs("q") == []


def rows_of(*subjects: str) -> list[tuple[bytes, bytes]]:
    now = datetime.now(UTC)
    return [
        (keys.new_key("q"), codec.encode([Message(subject=s, queued_at=now)])) for s in subjects
    ]


def test_a_cutoff_before_the_earliest_64_bit_instant_expires_nothing() -> None:
    assert codec.read_rows is not None
    found, stop = codec.read_rows(rows_of("a", "b"), 0, 2, -(2**80), 2**80, Queued)
    assert ([q.msg.subject for q in found], stop) == (["a", "b"], 2)


def test_a_cutoff_past_the_latest_64_bit_instant_leaves_every_row_to_the_python_rules() -> None:
    assert codec.read_rows is not None
    assert codec.read_rows(rows_of("a"), 0, 1, 2**80, 2**20, Queued) == ([], 0)
