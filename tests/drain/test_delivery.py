"""The one delivery loop on a server's claim transaction: what a handler writes
there is undone when it fails and kept when it delivers, and a handler that
writes nothing costs the claim and the delete alone (no savepoint)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from deadletter.drain import Drainer, redeliver
from deadletter.wire.messages import Message
from tests.factories import insert_at, park, parked, parked_messages

pytestmark = pytest.mark.django_db(transaction=True)

behaviour: dict[str, Any] = {}
written: list[str] = []


def writing_handler(msg: Message) -> None:
    """Writes a row of queue "side" in the drain's own transaction, then does what
    the test asked: raise, mark the transaction for rollback, or return."""
    written.append(msg.subject)
    insert_at("side", 1, len(written), Message(subject=f"wrote {msg.subject}"))
    if behaviour.get("mark"):
        transaction.set_rollback(True)
    if error := behaviour.get("raise"):
        raise error


def quiet_handler(msg: Message) -> None:
    """Delivers without a statement."""


@pytest.fixture(autouse=True)
def on_a_server(settings: Any) -> Iterator[None]:
    if connection.vendor == "sqlite":
        pytest.skip("a server's claim transaction; SQLite holds none while handling")
    settings.DEADLETTER_HANDLERS = {"q": "tests.drain.test_delivery.writing_handler"}
    behaviour.clear()
    written.clear()
    yield
    behaviour.clear()


def test_a_failing_handlers_writes_are_undone_and_its_failure_recorded() -> None:
    behaviour["raise"] = ConnectionError("endpoint down")
    park("one")
    report = Drainer().run()
    assert report.failed == 1 and parked("side") == []
    (kept,) = parked_messages()
    assert (kept.subject, kept.extra["Attempts"]) == ("one", 1)


def test_a_delivering_handlers_writes_commit_with_the_delete() -> None:
    park("one", "two")
    assert Drainer().run().delivered == 2
    assert (parked(), parked("side")) == ([], ["wrote one", "wrote two"])


def test_a_handler_that_marks_a_rollback_has_its_writes_undone_and_still_delivers() -> None:
    behaviour["mark"] = True
    park("one")
    assert Drainer().run().delivered == 1
    assert (parked(), parked("side")) == ([], [])


def test_redeliver_undoes_a_failing_handlers_writes_as_the_drain_does() -> None:
    behaviour["raise"] = ConnectionError("endpoint down")
    (key,) = park("one")
    assert redeliver([key]).failed == 1
    assert (parked(), parked("side")) == (["one"], [])


def test_a_further_message_costs_its_claim_and_its_delete_and_no_savepoint(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.drain.test_delivery.quiet_handler"}

    def statements(count: int) -> list[str]:
        park(*(f"m{i}" for i in range(count)))
        with CaptureQueriesContext(connection) as captured:
            assert Drainer().run().delivered == count
        return [query["sql"].split()[0].upper() for query in captured.captured_queries]

    statements(1)  # the first pass also makes the queue's pass record
    more = Counter(statements(5)) - Counter(statements(2))
    more.pop("BEGIN", None), more.pop("COMMIT", None)  # one transaction a message, logged or not
    assert more == {"SELECT": 3, "DELETE": 3}
