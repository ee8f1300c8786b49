"""A settlement changes a row only while it holds the message its handler was handed
(`settlements`' compare-and-write on the key and the value): whatever the handler
did, an edit saved while it ran is left as it is, with a note in its History."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connections

from deadletter import NeedsOperator, PermanentFailure
from deadletter.drain.outcomes import deliver
from deadletter.drain.report import Outcome
from deadletter.models import ArchivedMessage
from deadletter.queue import claims, edits, history
from deadletter.wire import codec
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message
from tests.factories import insert_at, park, table_rows

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def editable(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {
        "q": {"handler": "tests.factories.ok_handler", "editable": True}
    }


def edit_now(key: bytes) -> None:
    """The operator's edit, saved while the handler runs: from another thread, so on
    its own connection, as a web request's edit comes (the handler's own writes are
    its transaction's, undone with it when it fails)."""

    def edit() -> None:
        try:
            value = dict(table_rows())[key]
            msg = codec.decode(value)[0]
            edits.edit_msg(
                key, msg.replace(subject="fixed"), expected=edits.etag_of(key, value), actor="ops"
            )
        finally:
            connections.close_all()

    operator = threading.Thread(target=edit)
    operator.start()
    operator.join()


def editing(then: Callable[[Message], Message | None]) -> Callable[[Message], Message | None]:
    def handler(msg: Message) -> Message | None:
        edit_now(keys_in_hand[0])
        return then(msg)

    return handler


keys_in_hand: list[bytes] = []


def delivers(msg: Message) -> None:
    return None


def delivers_part(msg: Message) -> Message:
    return msg.replace(fields=["rest"])


def fails(msg: Message) -> None:
    raise RuntimeError("downstream is down")


def refuses(msg: Message) -> None:
    raise PermanentFailure("no such account")


def holds(msg: Message) -> None:
    raise NeedsOperator("ask the owner")


@pytest.mark.parametrize(
    ("then", "outcome", "max_attempts"),
    [
        (delivers, Outcome.DELIVERED, None),
        (delivers_part, Outcome.REQUEUED, None),
        (fails, Outcome.FAILED, None),
        (fails, Outcome.MAX_ATTEMPTS, 1),
        (refuses, Outcome.PERMANENT, None),
        (holds, Outcome.HELD, None),
    ],
)
def test_an_edit_saved_while_the_handler_ran_is_left_with_a_note(
    then: Callable[[Message], Message | None], outcome: Outcome, max_attempts: int | None
) -> None:
    (key,) = park("broken", extra={"Attempts": 0, "LastError": "RuntimeError: before"})
    item = claims.fetch_msg(key)
    assert item is not None
    keys_in_hand[:] = [key]
    assert deliver(item, editing(then), max_attempts=max_attempts) == outcome
    (row,) = table_rows()
    assert row[0] == key
    msg = codec.decode(row[1])[0]
    assert (msg.subject, msg.extra) == (
        "fixed",
        {"Attempts": 0, "LastError": "RuntimeError: before"},
    )
    assert [r.reason for r in ArchivedMessage.objects.all()] == ["edited"]
    (attempt,) = history.attempts_of(key)
    assert attempt.outcome == "changed"
    assert f"({outcome}" in attempt.error


def test_a_row_another_encoder_wrote_is_still_settled() -> None:
    """The same message in other bytes (an indefinite-length array, as another CBOR
    writer may send): the settlement compares messages, not only bytes."""
    stored = codec.encode_one(Message(subject="from go", queued_at=GoTime.now()))
    assert stored[0] == 0x81
    other = b"\x9f" + stored[1:] + b"\xff"
    assert codec.decode(other) == codec.decode(stored)
    key = insert_at("q", 1, 1, other)
    item = claims.fetch_msg(key)
    assert item is not None
    assert deliver(item, fails) == Outcome.FAILED
    assert codec.decode(dict(table_rows())[key])[0].extra["Attempts"] == 1
    item = claims.fetch_msg(key)
    assert item is not None
    assert deliver(item, delivers) == Outcome.DELIVERED
    assert table_rows() == []
