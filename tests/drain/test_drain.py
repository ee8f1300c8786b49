"""deadletter.drain driven directly: outcomes, signals, limits, the SQLite lock."""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, connections

from deadletter import NeedsOperator, PermanentFailure, signals
from deadletter.drain import (
    DrainConfigError,
    Drainer,
    DrainLocked,
    DrainOptions,
    DrainReport,
    Outcome,
    QueueLock,
    deliver,
    redeliver,
)
from deadletter.drain.outcomes import is_held
from deadletter.models import QueuedMessage
from deadletter.queue import fetch_failed_msgs, store_failed_msgs
from deadletter.queue.claims import preview_failed_msgs, sqlite_file
from deadletter.queue.settlements import replace_msg
from deadletter.wire import codec, keys
from deadletter.wire.messages import Message
from tests.drain.drain_harness import Drain, claim_held_by_another_thread
from tests.factories import park, parked

pytestmark = pytest.mark.django_db(transaction=True)

HANDLERS = {"q": "tests.drain.test_drain.handler"}

# What the module-level `handler` does; each test sets it through `behave`.
calls: list[Message] = []
behaviour: dict[str, Any] = {}


def handler(msg: Message) -> Message | None:
    calls.append(msg)
    action = behaviour.get(msg.subject, behaviour.get("*"))
    if callable(action):
        return action(msg)
    if isinstance(action, BaseException):
        raise action
    return action


def other_handler(msg: Message) -> None:
    calls.append(msg)


@pytest.fixture(autouse=True)
def handlers(settings: Any) -> Iterator[None]:
    settings.DEADLETTER_HANDLERS = dict(HANDLERS)
    calls.clear()
    behaviour.clear()
    yield
    calls.clear()
    behaviour.clear()


def msg(subject: str, **kw: Any) -> Message:
    kw.setdefault("queued_at", datetime.now(UTC) - timedelta(hours=1))
    return Message(subject=subject, **kw)


def row(key: bytes) -> Message | None:
    found = QueuedMessage.objects.filter(key=key).values_list("value", flat=True).first()
    return None if found is None else codec.decode(bytes(found))[0]


def drain(queues: list[str] | None = None, **kw: Any) -> Any:
    return Drainer(queues, DrainOptions(**kw)).run()


@pytest.fixture
def received() -> Iterator[list[tuple[str, dict[str, Any]]]]:
    got: list[tuple[str, dict[str, Any]]] = []

    def recorder(name: str) -> Any:
        def receive(sender: str, **kwargs: Any) -> None:
            got.append((name, {"sender": sender, **kwargs}))

        return receive

    receivers = {
        "enqueued": recorder("enqueued"),
        "dequeued": recorder("dequeued"),
        "dropped": recorder("dropped"),
    }
    signals.message_enqueued.connect(receivers["enqueued"])
    signals.message_dequeued.connect(receivers["dequeued"])
    signals.message_dropped.connect(receivers["dropped"])
    yield got
    signals.message_enqueued.disconnect(receivers["enqueued"])
    signals.message_dequeued.disconnect(receivers["dequeued"])
    signals.message_dropped.disconnect(receivers["dropped"])


# --- outcomes ------------------------------------------------------------------


def test_handler_returning_none_delivers_and_dequeues_the_row() -> None:
    park("one")
    report = drain()
    assert [m.subject for m in calls] == ["one"]
    assert parked() == []
    assert report.delivered == 1


def test_messages_are_handed_over_oldest_first() -> None:
    park("one", "two", "three")
    drain()
    assert [m.subject for m in calls] == ["one", "two", "three"]


def test_returned_message_replaces_the_row_as_a_fresh_row_at_the_tail() -> None:
    first, _ = park("partly", "later")
    behaviour["partly"] = lambda m: m.replace(skip_recipients=["reached@example.com"])
    report = drain()
    assert row(first) is None
    rest = fetch_failed_msgs("q")
    assert [q.msg.subject for q in rest] == ["partly"]
    assert rest[0].key > first
    assert rest[0].msg.skip_recipients == ["reached@example.com"]
    assert report.requeued == 1


def test_replacement_keeps_the_original_queued_at() -> None:
    (key,) = park("partly")
    original = row(key).queued_at
    behaviour["partly"] = lambda m: m.replace(queued_at=None, skip_recipients=["a"])
    drain()
    assert fetch_failed_msgs("q")[0].msg.queued_at == original


def test_replacing_a_row_that_is_already_gone_parks_nothing() -> None:
    (key,) = park("gone")
    QueuedMessage.objects.filter(key=key).delete()
    assert replace_msg(key, msg("gone", skip_recipients=["a"])) is None
    assert parked() == []


def test_a_partly_delivered_message_waits_for_the_next_run() -> None:
    park("partly")
    behaviour["partly"] = lambda m: m.replace(skip_recipients=["a"])
    drain()
    assert len(calls) == 1


def test_permanent_failure_drops_the_row() -> None:
    park("never")
    behaviour["never"] = PermanentFailure("blocked recipient")
    report = drain()
    assert parked() == []
    assert report.dropped["permanent"] == 1


def test_failure_keeps_the_row_under_its_key_with_attempts_and_last_error() -> None:
    (key,) = park("flaky")
    behaviour["flaky"] = ConnectionError("downstream is down")
    report = drain()
    stayed = row(key)
    assert stayed.extra["Attempts"] == 1
    assert stayed.extra["LastError"] == "ConnectionError: downstream is down"
    assert report.failed == 1


def test_each_failed_run_raises_the_attempt_count() -> None:
    (key,) = park("flaky")
    behaviour["flaky"] = ConnectionError("down")
    drain()
    drain()
    assert row(key).extra["Attempts"] == 2


def test_failure_keeps_every_other_field() -> None:
    key = store_failed_msgs("q", msg("flaky", username="u", fields=["a"], extra={"Custom": "kept"}))
    behaviour["flaky"] = ValueError("x")
    drain()
    stayed = row(key)
    assert (stayed.username, stayed.fields, stayed.extra["Custom"]) == ("u", ["a"], "kept")


def test_last_error_is_cut_to_one_kib() -> None:
    (key,) = park("flaky")
    behaviour["flaky"] = ValueError("é" * 5000)
    drain()
    assert len(row(key).extra["LastError"].encode("utf-8")) <= 1024
    assert row(key).extra["LastError"].startswith("ValueError: éé")


def test_failed_message_is_not_retried_within_the_same_run() -> None:
    park("flaky", "fine")
    behaviour["flaky"] = ValueError("x")
    drain()
    assert [m.subject for m in calls] == ["flaky", "fine"]


def test_handler_returning_something_else_counts_as_a_failure() -> None:
    (key,) = park("odd")
    behaviour["odd"] = "not a message"
    drain()
    assert row(key).extra["LastError"].startswith("TypeError: handler returned str")


def test_max_attempts_drops_a_message_that_reaches_it(settings: Any) -> None:
    settings.DEADLETTER_MAX_ATTEMPTS = 2
    park("flaky")
    behaviour["flaky"] = ValueError("x")
    drain()
    report = drain()
    assert parked() == []
    assert report.dropped["max_attempts"] == 1


def test_a_message_kept_for_an_operator_stays_under_its_key_saying_why() -> None:
    (key,) = park("unknown task")
    behaviour["unknown task"] = NeedsOperator("task billing.charge is not registered here")
    report = drain()
    stayed = row(key)
    assert stayed.extra["LastError"] == "NeedsOperator: task billing.charge is not registered here"
    assert "Attempts" not in stayed.extra
    assert (report.held, report.failed, sum(report.dropped.values())) == (1, 0, 0)


def test_a_message_kept_for_an_operator_is_never_dropped_at_the_attempts_limit(
    settings: Any, received: list[tuple[str, dict[str, Any]]]
) -> None:
    settings.DEADLETTER_MAX_ATTEMPTS = 1
    (key,) = park("seal")
    behaviour["seal"] = NeedsOperator("the seal does not verify")
    first = drain()
    second = redeliver([key])
    assert (first.held, second.held, second.dropped["max_attempts"]) == (1, 1, 0)
    assert row(key).extra.get("Attempts", 0) == 0
    assert [name for name, _ in received if name == "dropped"] == []


def test_a_subclass_of_needs_operator_is_marked_as_needing_an_operator() -> None:
    class TaskUnknown(NeedsOperator):
        pass

    (key,) = park("sub")
    behaviour["sub"] = TaskUnknown("gone")
    drain()
    assert is_held(row(key).extra["LastError"])


def test_a_pass_that_kept_a_message_for_an_operator_exits_one() -> None:
    park("held", "fine")
    behaviour["held"] = NeedsOperator("x")
    assert drain().exit_code == 1


def test_held_messages_add_up_across_workers_reports() -> None:
    total = DrainReport(queues=["q"])
    one = DrainReport(queues=["q"])
    one.add(Outcome.HELD)
    total.merge(one.as_dict())
    total.merge(one.as_dict())
    assert (total.held, total.handled, total.as_dict()["held"]) == (2, 2, 2)


@pytest.mark.slow
def test_worker_processes_count_the_messages_they_kept_for_an_operator(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    if connection.vendor == "sqlite":
        pytest.skip("worker processes need PostgreSQL or MySQL/MariaDB")
    park("a", "b", "c")
    child = Drain(
        subprocess_env,
        tmp_path,
        "--workers",
        "2",
        "--format",
        "json",
        handler="tests.drain.drain_harness.needs_operator_handler",
    )
    assert child.wait() == 1, child.output()
    assert (child.summary()["held"], parked()) == (3, ["a", "b", "c"])


def test_without_max_attempts_a_failing_message_stays() -> None:
    park("flaky")
    behaviour["flaky"] = ValueError("x")
    for _ in range(3):
        drain()
    assert parked() == ["flaky"]


def test_expired_and_corrupt_rows_met_on_the_way_are_counted(settings: Any) -> None:
    store_failed_msgs("q", msg("old", queued_at=datetime.now(UTC) - timedelta(days=31)))
    QueuedMessage.objects.create(key=keys.new_key("q"), value=b"corrupted cbor data")
    report = drain()
    assert (report.dropped["expired"], report.dropped["corrupt"]) == (1, 1)
    assert calls == []


def test_deliver_settles_one_message_for_other_callers() -> None:
    park("one")
    (item,) = fetch_failed_msgs("q")
    assert deliver(item, other_handler) is Outcome.DELIVERED
    assert parked() == []


# --- signals from the drain's view ------------------------------------------------


def test_delivery_sends_message_dequeued_with_the_rows_key(received: list) -> None:
    (key,) = park("one")
    received.clear()
    drain()
    assert received == [
        ("dequeued", {"sender": "q", "key": key, "signal": signals.message_dequeued})
    ]


def test_partial_delivery_sends_dequeued_for_the_old_row_and_enqueued_for_the_new(
    received: list,
) -> None:
    (key,) = park("partly")
    behaviour["partly"] = lambda m: m.replace(skip_recipients=["a"])
    received.clear()
    drain()
    (new,) = fetch_failed_msgs("q")
    assert [(name, kw["key"]) for name, kw in received] == [
        ("dequeued", key),
        ("enqueued", new.key),
    ]


@pytest.mark.parametrize(
    ("action", "reason"),
    [(PermanentFailure("no"), "permanent"), (ValueError("x"), "max_attempts")],
)
def test_a_drop_sends_message_dropped_with_its_reason(
    received: list, settings: Any, action: BaseException, reason: str
) -> None:
    settings.DEADLETTER_MAX_ATTEMPTS = 1
    (key,) = park("doomed")
    behaviour["doomed"] = action
    received.clear()
    drain()
    assert [(n, kw["key"], kw["reason"]) for n, kw in received] == [("dropped", key, reason)]
    assert received[0][1]["msg"].subject == "doomed"


def test_an_expired_message_sends_message_dropped_expired(received: list) -> None:
    store_failed_msgs("q", msg("old", queued_at=datetime.now(UTC) - timedelta(days=31)))
    received.clear()
    drain()
    assert [(n, kw["reason"]) for n, kw in received] == [("dropped", "expired")]


def test_a_corrupt_row_sends_message_dropped_corrupt(received: list) -> None:
    QueuedMessage.objects.create(key=keys.new_key("q"), value=b"corrupted cbor data")
    drain()
    assert [(n, kw["reason"], kw["msg"]) for n, kw in received] == [("dropped", "corrupt", None)]


def test_a_failure_sends_no_signal(received: list) -> None:
    park("flaky")
    behaviour["flaky"] = ValueError("x")
    received.clear()
    drain()
    assert received == []


# --- the run --------------------------------------------------------------------


def test_all_configured_queues_are_drained_by_default(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {**HANDLERS, "other": "tests.drain.test_drain.other_handler"}
    park("one")
    park("two", queue="other")
    drain()
    assert sorted(m.subject for m in calls) == ["one", "two"]


def test_only_the_named_queues_are_drained(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {**HANDLERS, "other": "tests.drain.test_drain.other_handler"}
    park("one")
    park("two", queue="other")
    drain(queues=["other"])
    assert parked() == ["one"]


def test_a_queue_without_a_handler_is_a_config_error() -> None:
    with pytest.raises(DrainConfigError, match="no handler configured for queue"):
        Drainer(["nope"])


def test_a_bad_handler_path_refuses_to_start_before_touching_any_row(settings: Any) -> None:
    QueuedMessage.objects.create(key=keys.new_key("q"), value=b"corrupted cbor data")
    settings.DEADLETTER_HANDLERS = {"q": "tests.nowhere.handler"}
    with pytest.raises(DrainConfigError, match="does not import"):
        Drainer()
    assert QueuedMessage.objects.count() == 1


def test_limit_caps_the_messages_handed_over() -> None:
    park("one", "two", "three")
    report = drain(limit=2)
    assert parked() == ["three"]
    assert report.delivered == 2


def test_rate_holds_back_the_next_delivery_until_a_stop_ends_the_pause() -> None:
    park("one", "two")
    drainer = Drainer(options=DrainOptions(rate=0.001))  # one per 1,000 s: "two" would wait
    behaviour["one"] = lambda m: threading.Timer(0.2, drainer.stop, ("test",)).start()
    report = drainer.run()
    assert [m.subject for m in calls] == ["one"]
    assert report.stopped_by == "test"


def test_stop_ends_the_run_after_the_message_in_hand() -> None:
    park("one", "two")
    drainer = Drainer()
    behaviour["one"] = lambda m: drainer.stop("test")
    report = drainer.run()
    assert parked() == ["two"]
    assert (report.delivered, report.stopped_by) == (1, "test")


def test_a_run_visits_only_the_rows_there_when_it_started() -> None:
    park("one")
    behaviour["one"] = lambda m: store_failed_msgs("q", msg("arrived meanwhile")) and None
    drain()
    assert [m.subject for m in calls] == ["one"]
    assert parked() == ["arrived meanwhile"]


def test_exit_code_is_one_while_a_message_stayed_failed() -> None:
    park("flaky", "fine")
    behaviour["flaky"] = ValueError("x")
    assert drain().exit_code == 1


def test_exit_code_is_zero_when_nothing_stayed_failed() -> None:
    park("fine")
    assert drain().exit_code == 0


def test_preview_changes_nothing() -> None:
    store_failed_msgs("q", msg("old", queued_at=datetime.now(UTC) - timedelta(days=31)))
    QueuedMessage.objects.create(key=keys.new_key("q"), value=b"corrupted cbor data")
    park("fine")
    verdicts = [p.verdict for p in preview_failed_msgs("q")]
    assert verdicts == ["expired", "corrupt", "deliver"]
    assert QueuedMessage.objects.count() == 3


def test_workers_above_one_are_refused_on_sqlite() -> None:
    if connection.vendor != "sqlite":
        pytest.skip("SQLite rule")
    with pytest.raises(DrainConfigError, match="needs PostgreSQL"):
        Drainer(options=DrainOptions(workers=2))


# --- SQLite: one drain per queue, no write lock during a handler ---------------------


def _sqlite_only() -> None:
    if connection.vendor != "sqlite":
        pytest.skip(
            "SQLite only: PostgreSQL drains claim rows instead (tests/drain/test_scale_out.py)"
        )


def _drain_in_thread(in_hand: threading.Event, release: threading.Event) -> threading.Thread:
    def blocking(m: Message) -> None:
        in_hand.set()
        assert release.wait(30)

    behaviour["*"] = blocking

    def run() -> None:
        try:
            Drainer().run()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    assert in_hand.wait(30)
    return thread


def test_a_second_drain_of_the_same_sqlite_queue_says_why_it_cannot_run() -> None:
    _sqlite_only()
    park("one", "two")
    in_hand, release = threading.Event(), threading.Event()
    thread = _drain_in_thread(in_hand, release)
    try:
        with pytest.raises(DrainLocked, match="being drained by another process"):
            Drainer().run()
    finally:
        release.set()
        thread.join()
    assert [m.subject for m in calls] == ["one", "two"]


def test_a_drain_with_wait_runs_once_the_other_finishes() -> None:
    _sqlite_only()
    park("one")
    lock = QueueLock(sqlite_file(), ["q"])
    with lock:
        waiting = Drainer(options=DrainOptions(wait=True))
        result: list[Any] = []
        thread = threading.Thread(target=lambda: result.append(waiting.run()))
        thread.start()
        thread.join(0.5)
        assert thread.is_alive()
    thread.join(30)
    assert result[0].delivered == 1


def test_a_slow_handler_holds_no_sqlite_write_lock() -> None:
    """With the busy timeout at 0, any write lock held by the drain would make
    this store fail at once with "database is locked" instead of waiting."""
    _sqlite_only()
    park("slow")
    in_hand, release = threading.Event(), threading.Event()
    thread = _drain_in_thread(in_hand, release)
    try:
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA busy_timeout = 0")
        store_failed_msgs("q", msg("parked while the handler runs"))
    finally:
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA busy_timeout = 30000")
        release.set()
        thread.join()
    assert parked() == ["parked while the handler runs"]


def test_the_lock_file_is_beside_the_database_and_names_the_owner() -> None:
    _sqlite_only()
    with QueueLock(sqlite_file(), ["q"]):
        path = QueueLock.path_for(sqlite_file(), "q")
        assert path.parent == Path(sqlite_file()).parent
        assert path.read_text().split()[0] == str(os.getpid())


def test_the_database_file_itself_is_locked_whatever_its_name(tmp_path: Path) -> None:
    """A second name the lock file cannot see (a hard link: another path, another
    directory) still meets the lock taken on the file's identity."""
    _sqlite_only()
    if not hasattr(fcntl, "F_OFD_SETLK"):
        pytest.skip("open-file-description locks are Linux's")
    other_name = tmp_path / "same-file.sqlite3"
    os.link(sqlite_file(), other_name)
    with QueueLock(sqlite_file(), ["q"]):
        with (
            pytest.raises(DrainLocked, match="through another name"),
            QueueLock(str(other_name), ["q"]),
        ):
            pass
        with QueueLock(str(other_name), ["another queue"]):
            pass
    with QueueLock(str(other_name), ["q"]):
        pass


# --- redeliver: "retry these" for the admin and the API ---------------------------


def test_redeliver_hands_over_exactly_the_selected_rows() -> None:
    one, _, three = park("one", "two", "three")
    report = redeliver([three, one])
    assert [m.subject for m in calls] == ["one", "three"]
    assert parked() == ["two"]
    assert report.delivered == 2


def test_redeliver_records_a_failure_like_a_drain() -> None:
    (key,) = park("flaky")
    behaviour["flaky"] = ValueError("x")
    redeliver([key])
    assert row(key).extra["Attempts"] == 1


def test_redeliver_skips_a_row_that_is_gone() -> None:
    (key,) = park("gone")
    QueuedMessage.objects.filter(key=key).delete()
    assert redeliver([key]).handled == 0


def test_redeliver_refuses_a_queue_without_a_handler() -> None:
    key = store_failed_msgs("elsewhere", msg("one"))
    with pytest.raises(DrainConfigError, match="no handler configured"):
        redeliver([key])
    assert parked("elsewhere") == ["one"]


def test_redeliver_waits_its_turn_behind_a_running_sqlite_drain() -> None:
    _sqlite_only()
    (key,) = park("one")
    with QueueLock(sqlite_file(), ["q"]), pytest.raises(DrainLocked):
        redeliver([key])


def test_redeliver_leaves_a_row_another_drain_holds(settings: Any) -> None:
    if connection.vendor == "sqlite":
        pytest.skip("PostgreSQL and MySQL claim rows")
    (key,) = park("held")
    with claim_held_by_another_thread("q"):
        report = redeliver([key])
    assert (report.handled, calls) == (0, [])


def test_an_unreachable_database_server_ends_the_run_with_an_error(unreachable_db: str) -> None:
    if connection.vendor == "sqlite":
        pytest.skip("a server: the lock file stands first on SQLite")
    assert Drainer().run().exit_code == 1


def test_an_unusable_sqlite_path_is_a_config_error(unreachable_db: str) -> None:
    _sqlite_only()
    with pytest.raises(DrainConfigError, match="drain lock file"):
        Drainer().run()
