"""deadletter.queue.seals: a seal verifies on what the queue reads back and
under a fallback key, and breaks on any change of what it covers; a reserved
key is refused naming the integration that reserves it."""

from __future__ import annotations

from typing import Any

import pytest

from deadletter.exceptions import NeedsOperator
from deadletter.queue import fetch_failed_msgs, seals, store_failed_msgs
from deadletter.wire.messages import Message

SEAL = seals.Seal(purpose="tests.queue.test_seals", key="TestSeal", fields=("Path", "Args"))
REMOVED = object()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "args",
    [
        pytest.param([[1, [2, [3, []]]], (4, (5, ()))], id="nested lists and tuples"),
        pytest.param(["héllo", "✓ 😀", "e\u0301", "\u0000", ""], id="unicode"),
        pytest.param([2**63, 2**64 - 1, 2**64, -(2**64) - 1, 10**30, -(10**30)], id="big ints"),
        pytest.param([0.1, 1.5, 1.0, -0.0, 1e308, 5e-324, float("inf")], id="floats"),
        pytest.param([None, True, False, 0], id="None and booleans"),
        pytest.param({"z": {"b": [1, {"y": None, "a": 2.5}], "a": 1}, "é": {}}, id="nested dicts"),
    ],
)
def test_a_seal_verifies_on_the_message_the_queue_reads_back(args: Any) -> None:
    store_failed_msgs("q", Message(extra=SEAL.sealed({"Path": "some.path", "Args": args})))

    [item] = fetch_failed_msgs("q")

    SEAL.check(item.msg.extra)


def test_the_order_of_a_map_s_keys_does_not_change_the_seal() -> None:
    extra = SEAL.sealed({"Path": "p", "Args": {"a": 1, "b": {"c": 2, "d": 3}}})
    reordered = {
        "TestSeal": extra["TestSeal"],
        "Args": {"b": {"d": 3, "c": 2}, "a": 1},
        "Path": "p",
    }

    SEAL.check(reordered)


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (1, 1.0),
        (1, True),
        (1, "1"),
        ([], None),
        ([1, 2], [2, 1]),
        ("é", "e\u0301"),
        ({"a": 1}, {"a": 1, "b": None}),
        ([1], REMOVED),
    ],
)
def test_any_change_of_a_sealed_value_breaks_the_seal(before: Any, after: Any) -> None:
    extra = SEAL.sealed({"Path": "p", "Args": before})
    changed = {**extra, "Args": after}
    if after is REMOVED:
        del changed["Args"]

    with pytest.raises(seals.SealBroken, match="TestSeal does not match Path"):
        SEAL.check(changed)


def test_keys_the_seal_does_not_cover_may_change() -> None:
    extra = SEAL.sealed({"Path": "p", "Args": [1]})

    SEAL.check({**extra, "Attempts": 3, "LastError": "boom"})


def test_one_purpose_s_seal_never_verifies_for_another() -> None:
    other = seals.Seal(purpose="tests.other", key=SEAL.key, fields=SEAL.fields)

    with pytest.raises(seals.SealBroken):
        SEAL.check(other.sealed({"Path": "p", "Args": [1]}))


@pytest.mark.parametrize(
    ("seal", "why"),
    [
        (None, "no TestSeal key: the message was not parked by tests.queue.test_seals"),
        (b"x", "bytes"),
    ],
)
def test_a_missing_seal_or_one_that_is_not_text_says_so(seal: Any, why: str) -> None:
    with pytest.raises(seals.SealBroken, match=why):
        SEAL.check({"Path": "p", "TestSeal": seal})


def test_a_seal_made_under_a_key_now_in_secret_key_fallbacks_verifies(settings: Any) -> None:
    settings.SECRET_KEY = "old-key"
    extra = SEAL.sealed({"Path": "p"})
    settings.SECRET_KEY = "new-key"
    settings.SECRET_KEY_FALLBACKS = ["old-key"]

    SEAL.check(extra)


def test_a_seal_made_under_a_retired_key_is_broken(settings: Any) -> None:
    settings.SECRET_KEY = "old-key"
    extra = SEAL.sealed({"Path": "p"})
    settings.SECRET_KEY = "new-key"
    settings.SECRET_KEY_FALLBACKS = []

    with pytest.raises(seals.SealBroken, match="no longer in SECRET_KEY or SECRET_KEY_FALLBACKS"):
        SEAL.check(extra)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty registry for the test; the integrations' own entries come back after."""
    monkeypatch.setattr(seals, "_reserved", {})


def test_reserved_keys_are_refused_naming_each_and_who_reserves_it(registry: None) -> None:
    seals.reserve("tests.first", ["A2", "A1"])
    seals.reserve("tests.second", ["B"])

    with pytest.raises(seals.ReservedKey) as refused:
        seals.refuse_reserved(["free", "B", "A1", "A2"])

    assert str(refused.value) == (
        "'A1', 'A2' reserved by tests.first, which alone parks them; "
        "'B' reserved by tests.second, which alone parks them"
    )


def test_keys_nobody_reserves_are_not_refused(registry: None) -> None:
    seals.reserve("tests.first", ["A"])

    seals.refuse_reserved(["a", "AB", "free"])


def test_a_key_is_reserved_by_one_integration_only(registry: None) -> None:
    seals.reserve("tests.first", ["A"])
    seals.reserve("tests.first", ["A"])

    with pytest.raises(ValueError, match="'A' is already reserved by tests.first"):
        seals.reserve("tests.second", ["A"])


def test_a_handler_that_requires_a_seal_keeps_a_broken_one_for_an_operator() -> None:
    extra = SEAL.sealed({"Path": "p", "Args": [1]})

    with pytest.raises(NeedsOperator, match="refused to redrive, nothing sent: TestSeal does not"):
        SEAL.require({**extra, "Args": [2]}, "nothing sent")
