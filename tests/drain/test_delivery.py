"""The one delivery loop on a server's claim transaction: what a handler writes
there is undone when it fails and kept when it delivers, a handler that writes
nothing costs the claim, the delete and the commit alone (no savepoint, no
autocommit switch), and commit hooks run after each message's commit."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction
from django.test.utils import CaptureQueriesContext

from deadletter import signals
from deadletter.drain import Drainer, Outcome, redeliver
from deadletter.drain.delivery import Delivery, Stop
from deadletter.drain.handlers import load_handlers
from deadletter.drain.options import DrainOptions
from deadletter.drain.report import DrainReport
from deadletter.drain.timeouts import TimeLimit
from deadletter.queue.claims import fetch_msg
from deadletter.queue.rows import Queued
from deadletter.wire.messages import Message
from tests.factories import insert_at, park, parked, parked_messages, raw_sql

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


events: list[object] = []


def _note(what: str, subject: str) -> None:
    events.append((what, subject, connection.get_autocommit(), connection.in_atomic_block))


def hooking_handler(msg: Message) -> None:
    """Asks for a callback once its message's transaction commits."""
    _note("handled", msg.subject)

    def committed() -> None:
        _note("committed", msg.subject)
        events.append(parked())

    transaction.on_commit(committed)
    if error := behaviour.get("raise"):
        raise error


@pytest.fixture(autouse=True)
def on_a_server(settings: Any) -> Iterator[None]:
    if connection.vendor == "sqlite":
        pytest.skip("a server's claim transaction; SQLite holds none while handling")
    settings.DEADLETTER_HANDLERS = {"q": "tests.drain.test_delivery.writing_handler"}
    behaviour.clear()
    written.clear()
    events.clear()
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
    assert more == {"SELECT": 3, "DELETE": 3, "COMMIT": 3}  # no BEGIN: autocommit stays off


def test_a_handlers_commit_hook_runs_after_its_commit_in_autocommit_before_the_next(
    settings: Any,
) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.drain.test_delivery.hooking_handler"}
    park("one", "two")
    assert Drainer().run().delivered == 2
    assert events == [
        ("handled", "one", False, True),
        ("committed", "one", True, False),
        ["two"],  # the hook sees its message's delete committed
        ("handled", "two", False, True),
        ("committed", "two", True, False),
        [],
    ]
    assert connection.get_autocommit()


def test_a_failing_handlers_commit_hook_does_not_run(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.drain.test_delivery.hooking_handler"}
    behaviour["raise"] = ConnectionError("endpoint down")
    park("one")
    assert Drainer().run().failed == 1
    assert events == [("handled", "one", False, True)]


def test_message_dequeued_is_sent_after_each_commit_in_autocommit(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.drain.test_delivery.quiet_handler"}
    keys = park("one", "two")

    def receiver(sender: str, key: bytes, **kwargs: Any) -> None:
        events.append(("dequeued", key.hex(), connection.get_autocommit(), len(parked())))

    signals.message_dequeued.connect(receiver)
    try:
        assert Drainer().run().delivered == 2
    finally:
        signals.message_dequeued.disconnect(receiver)
    assert events == [("dequeued", keys[0].hex(), True, 1), ("dequeued", keys[1].hex(), True, 0)]


def test_between_messages_a_drain_stays_out_of_autocommit_and_a_retry_does_not(
    settings: Any,
) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.drain.test_delivery.quiet_handler"}
    park("one", "two")

    def seen(outcome: Outcome) -> None:
        _note(str(outcome), "drain")

    assert Drainer(on_outcome=seen).run().delivered == 2
    (key,) = park("three")
    assert redeliver([key], on_outcome=lambda k, o: _note(str(o), "retry")).delivered == 1
    assert events == [
        ("delivered", "drain", False, False),
        ("delivered", "drain", False, False),
        ("delivered", "retry", True, False),
    ]
    assert connection.get_autocommit()


@pytest.mark.parametrize("limit", [None, 2])
def test_what_on_outcome_writes_between_messages_commits(settings: Any, limit: int | None) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.drain.test_delivery.quiet_handler"}
    park("one", "two", "three")

    def write(outcome: Outcome) -> None:
        written.append(str(outcome))
        insert_at("side", 1, len(written), Message(subject=f"noted {len(written)}"))

    report = Drainer(options=DrainOptions(limit=limit), on_outcome=write).run()
    assert report.delivered == (limit or 3)
    assert parked("side") == [f"noted {n}" for n in range(1, (limit or 3) + 1)]
    assert connection.get_autocommit()


def test_a_database_error_mid_source_rolls_its_message_back_and_gives_autocommit_back(
    settings: Any,
) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.drain.test_delivery.quiet_handler"}
    first, second = park("one", "two")
    claims = iter([first, second])

    def take() -> Queued | None:
        key = next(claims)
        item = fetch_msg(key)
        if key == second:
            with connection.cursor() as cursor:
                cursor.execute(raw_sql("SELECT no_such_column FROM {table}"))
        return item

    delivery = Delivery(
        handlers=load_handlers(["q"]),
        report=DrainReport(queues=["q"]),
        stop=Stop(),
        limit=TimeLimit.within(),
    )
    with pytest.raises(DatabaseError):
        delivery.hand_over(take, "q")
    assert delivery.report.delivered == 1
    assert (parked(), connection.get_autocommit(), connection.in_atomic_block) == (
        ["two"],
        True,
        False,
    )
