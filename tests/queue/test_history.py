"""Each failed attempt's history: a row per attempt in the caller's transaction, the
newest `KEEP` of a key kept, errors cut on a character boundary, and a key's rows
forgotten or moved whole."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from deadletter.models import Attempt
from deadletter.queue import history
from deadletter.queue.history import KEEP, AttemptRecord
from deadletter.wire import keys

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def key(seq: int = 1) -> bytes:
    return keys.make_key("q", 1_000, seq)


def record(k: bytes, n: int, *, attempts: int | None = None, error: str = "") -> None:
    history.record_attempt(
        connection,
        k,
        at=T0 + timedelta(seconds=n),
        duration=n / 10,
        outcome=history.AttemptOutcome.FAILED,
        error=error or f"ConnectionError: try {n}",
        actor="drain",
        attempts=n if attempts is None else attempts,
    )


def test_an_attempt_is_recorded_with_all_it_says() -> None:
    history.record_attempt(
        connection,
        key(),
        at=T0,
        duration=1.25,
        outcome=history.AttemptOutcome.TIMEOUT,
        error="HandlerTimeout: handler did not return within 5 s",
        actor="retry:alice",
        attempts=1,
    )
    assert history.attempts_of(key()) == [
        AttemptRecord(
            T0, 1.25, "timeout", "HandlerTimeout: handler did not return within 5 s", "retry:alice"
        )
    ]


def test_attempts_read_oldest_first_and_only_their_keys() -> None:
    for n in (1, 2, 3):
        record(key(1), n)
    record(key(2), 9)
    assert [a.error for a in history.attempts_of(key(1))] == [
        "ConnectionError: try 1",
        "ConnectionError: try 2",
        "ConnectionError: try 3",
    ]
    assert [a.error for a in history.attempts_of(key(2))] == ["ConnectionError: try 9"]


def test_a_key_keeps_its_newest_attempts_only() -> None:
    for n in range(1, KEEP + 6):
        record(key(), n)
    kept = history.attempts_of(key())
    assert len(kept) == KEEP
    assert kept[0].error == "ConnectionError: try 6"
    assert kept[-1].error == f"ConnectionError: try {KEEP + 5}"


def test_below_the_limit_nothing_but_the_insert_is_sent() -> None:
    with CaptureQueriesContext(connection) as seen:
        record(key(), 1, attempts=KEEP)
    assert [q["sql"].split()[0] for q in seen.captured_queries] == ["INSERT"]


def test_an_attempt_that_leaves_attempts_as_they_were_is_trimmed_too() -> None:
    for n in range(1, KEEP + 3):
        record(key(), n, attempts=None if n > KEEP else n)
    assert len(history.attempts_of(key())) == KEEP


def test_an_error_is_cut_on_a_character_boundary() -> None:
    record(key(), 1, error="é" * history.ERROR_LIMIT)
    (kept,) = history.attempts_of(key())
    assert len(kept.error.encode()) <= history.ERROR_LIMIT
    assert kept.error == "é" * (history.ERROR_LIMIT // 2)


def test_cut_leaves_a_short_text_alone() -> None:
    assert history.cut("ValueError: bad") == "ValueError: bad"
    assert history.cut("abcdé", 5) == "abcd"


def test_an_attempt_rolls_back_with_its_transaction() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        record(key(), 1)
        raise RuntimeError("the settlement failed")
    assert history.attempts_of(key()) == []


def test_forget_removes_every_attempt_of_the_key_alone() -> None:
    for n in (1, 2):
        record(key(1), n)
    record(key(2), 3)
    assert history.forget(connection, key(1)) == 2
    assert history.attempts_of(key(1)) == []
    assert len(history.attempts_of(key(2))) == 1


def test_move_gives_the_attempts_to_the_new_key() -> None:
    for n in (1, 2):
        record(key(1), n)
    assert history.move(connection, key(1), key(2)) == 2
    assert history.attempts_of(key(1)) == []
    assert [a.error for a in history.attempts_of(key(2))] == [
        "ConnectionError: try 1",
        "ConnectionError: try 2",
    ]
    assert Attempt.objects.count() == 2
