"""What a handler writes on the queue's database is committed with its delivery and
undone when it fails or marks its transaction for rollback (`set_rollback(True)`),
on SQLite as on the servers: SQLite claims no row, so the handler gets a transaction
of its own, begun only at its first write."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, transaction

from deadletter.drain import Drainer
from deadletter.wire.messages import Message
from tests.factories import insert_at, park, parked, parked_messages

pytestmark = pytest.mark.django_db(transaction=True)

behaviour: dict[str, Any] = {}
seen: list[object] = []


def writing_handler(msg: Message) -> None:
    """Writes a row of queue "side", then marks a rollback or raises, as asked."""
    insert_at("side", 1, len(parked("side")) + 1, Message(subject=f"wrote {msg.subject}"))
    if behaviour.get("mark"):
        transaction.set_rollback(True)
    if error := behaviour.get("raise"):
        raise error


def marking_handler(msg: Message) -> None:
    """Marks a rollback before it touches the database at all."""
    transaction.set_rollback(True)


def reading_handler(msg: Message) -> None:
    """Reads, and notes whether a transaction is open on the connection's driver."""
    seen.append(parked("side"))
    if connection.vendor == "sqlite":
        seen.append(connection.connection.in_transaction)


def hooking_handler(msg: Message) -> None:
    """Asks for a callback once its work commits, writing nothing; raises if asked."""
    transaction.on_commit(lambda: seen.append(f"committed {msg.subject}"))
    if error := behaviour.get("raise"):
        raise error


@pytest.fixture(autouse=True)
def handlers(settings: Any) -> Iterator[None]:
    settings.DEADLETTER_HANDLERS = {
        "q": "tests.drain.test_handler_rollback.writing_handler",
        "marks": "tests.drain.test_handler_rollback.marking_handler",
        "reads": "tests.drain.test_handler_rollback.reading_handler",
        "hooks": "tests.drain.test_handler_rollback.hooking_handler",
    }
    behaviour.clear()
    seen.clear()
    yield
    behaviour.clear()


def test_a_handler_that_marks_a_rollback_has_its_writes_undone_and_delivers() -> None:
    behaviour["mark"] = True
    park("one", "two")
    report = Drainer(["q"]).run()
    assert (report.delivered, report.failed) == (2, 0)
    assert (parked(), parked("side")) == ([], [])


def test_a_handler_that_marks_a_rollback_before_any_statement_delivers() -> None:
    park("one", queue="marks")
    assert Drainer(["marks"]).run().delivered == 1
    assert parked("marks") == []


def test_a_delivering_handlers_writes_are_kept() -> None:
    park("one", "two")
    assert Drainer(["q"]).run().delivered == 2
    assert (parked(), parked("side")) == ([], ["wrote one", "wrote two"])


def test_a_failing_handlers_writes_are_undone_and_its_failure_recorded() -> None:
    behaviour["raise"] = ConnectionError("endpoint down")
    park("one")
    assert Drainer(["q"]).run().failed == 1
    assert parked("side") == []
    (kept,) = parked_messages()
    assert (kept.subject, kept.extra["Attempts"]) == ("one", 1)


def test_a_handler_that_only_reads_opens_no_transaction_on_sqlite() -> None:
    """No write, no BEGIN: a SQLite write lock is never held over a reading handler."""
    park("one", queue="reads")
    assert Drainer(["reads"]).run().delivered == 1
    expected = [[], False] if connection.vendor == "sqlite" else [[]]
    assert seen == expected
    assert connection.get_autocommit()


def test_a_delivering_handlers_commit_hook_runs() -> None:
    park("one", queue="hooks")
    assert Drainer(["hooks"]).run().delivered == 1
    assert seen == ["committed one"]


def test_a_failing_handlers_commit_hook_is_dropped() -> None:
    behaviour["raise"] = ConnectionError("endpoint down")
    park("one", queue="hooks")
    assert Drainer(["hooks"]).run().failed == 1
    assert seen == []
