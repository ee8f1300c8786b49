from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from asgiref.sync import sync_to_async
from django.db import connections

import deadletter
import deadletter.queue
from deadletter import drain
from deadletter.models import QueuedMessage
from deadletter.queue import (
    MAX_QUEUE_AGE,
    Queued,
    QueueingError,
    Removal,
    adequeue,
    afetch_failed_msgs,
    astore_failed_msgs,
    dequeue,
    fetch_failed_msgs,
    iter_failed_msgs,
    remove_msg,
    store_failed_msgs,
)
from deadletter.queue.rows import ATTEMPTS_KEY
from deadletter.store import sql
from deadletter.wire import codec, keys
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message

pytestmark = pytest.mark.django_db(transaction=True)

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.fixture
def clock():
    with time_machine.travel(NOW, tick=True) as traveller:
        yield traveller


def msg(subject: str, queued_at: datetime | None = None, **kw) -> Message:
    return Message(subject=subject, queued_at=queued_at or NOW - timedelta(hours=1), **kw)


def subjects(queued: list[Queued]) -> list[str]:
    return [q.msg.subject for q in queued]


def put_row(key: bytes, messages: list[Message]) -> None:
    QueuedMessage.objects.create(key=key, value=codec.encode(messages))


def row_keys(queue: str = "q") -> list[bytes]:
    low, high = keys.queue_bounds(queue)
    return sorted(
        bytes(k)
        for k in QueuedMessage.objects.filter(key__gte=low, key__lt=high).values_list(
            "key", flat=True
        )
    )


def test_max_queue_age_is_30_days_by_default() -> None:
    assert timedelta(days=30) == MAX_QUEUE_AGE
    assert timedelta(days=30) == deadletter.MAX_QUEUE_AGE


def test_max_queue_age_follows_the_setting(settings) -> None:
    settings.DEADLETTER_MAX_QUEUE_AGE = timedelta(days=3)
    assert timedelta(days=3) == deadletter.MAX_QUEUE_AGE
    assert timedelta(days=3) == deadletter.queue.MAX_QUEUE_AGE


def test_queueing_error_says_problem_with_persistent_queue() -> None:
    assert str(QueueingError()) == "problem with persistent queue"


def test_queueing_error_names_its_cause_after_the_seeds_text() -> None:
    try:
        try:
            raise OSError("disk full")
        except OSError as exc:
            raise QueueingError from exc
    except QueueingError as error:
        assert str(error) == "problem with persistent queue: OSError: disk full"
        assert isinstance(error.__cause__, OSError)
    assert str(QueueingError("no free key")) == "problem with persistent queue: no free key"


def test_store_with_the_database_unreachable_says_why(unreachable_db) -> None:
    with pytest.raises(QueueingError, match=r"^problem with persistent queue: \w+Error: ") as info:
        store_failed_msgs("q", Message(subject="x"))
    assert info.value.__cause__ is not None


def test_an_unencodable_message_says_why() -> None:
    with pytest.raises(QueueingError, match="^problem with persistent queue: .+") as info:
        store_failed_msgs("q", Message(subject="x", extra={"Bad": object()}))
    assert info.value.__cause__ is not None


def test_a_message_that_would_not_read_back_is_refused_and_nothing_is_written() -> None:
    with pytest.raises(QueueingError, match="would not read back"):
        store_failed_msgs("q", Message(subject="x", extra={"ById": {7: "seven"}}))
    assert fetch_failed_msgs("q") == []


def test_a_message_never_tried_has_no_attempts_and_no_last_error(clock) -> None:
    store_failed_msgs("q", msg("fresh"))
    (fetched,) = fetch_failed_msgs("q")
    assert fetched.attempts == 0
    assert fetched.last_error is None


def test_attempts_and_last_error_are_what_the_drain_recorded(clock) -> None:
    store_failed_msgs("q", msg("flaky"))

    def handler(message: Message) -> None:
        raise ConnectionError("webhook answered 502")

    for _ in range(2):
        (item,) = fetch_failed_msgs("q")
        assert drain.deliver(item, handler) is drain.Outcome.FAILED
    (fetched,) = fetch_failed_msgs("q")
    assert fetched.attempts == 2
    assert fetched.last_error == "ConnectionError: webhook answered 502"
    assert fetched.msg.extra[ATTEMPTS_KEY] == fetched.attempts


def test_fetch_returns_messages_oldest_first(clock) -> None:
    for name in ("one", "two", "three"):
        store_failed_msgs("q", msg(name))
    assert subjects(fetch_failed_msgs("q")) == ["one", "two", "three"]


def test_fetch_does_not_drain(clock) -> None:
    store_failed_msgs("q", msg("one"))
    fetch_failed_msgs("q")
    assert subjects(fetch_failed_msgs("q")) == ["one"]


def test_store_returns_the_key_of_the_new_row(clock) -> None:
    key = store_failed_msgs("q", msg("one"))
    assert [q.key for q in fetch_failed_msgs("q")] == [key]


def test_store_stamps_queued_at_only_if_unset(clock) -> None:
    first_failure = NOW - timedelta(days=3)
    store_failed_msgs("q", Message(subject="old", queued_at=first_failure))
    store_failed_msgs("q", Message(subject="new"))
    old, new = fetch_failed_msgs("q")
    assert old.msg.queued_at == GoTime.from_datetime(first_failure)
    assert new.msg.queued_at is not None
    assert abs(new.msg.queued_at.unix_ns - NOW.timestamp() * 1e9) < 5e9


def test_store_leaves_the_callers_message_alone(clock) -> None:
    original = Message(subject="x")
    store_failed_msgs("q", original)
    assert original.queued_at is None


def test_store_retries_a_key_collision_with_a_fresh_key(clock, monkeypatch) -> None:
    taken = store_failed_msgs("q", msg("first"))
    issued = iter([taken, keys.new_key("q")])
    monkeypatch.setattr(keys, "new_key", lambda prefix: next(issued))
    second = store_failed_msgs("q", msg("second"))
    assert second != taken
    assert subjects(fetch_failed_msgs("q")) == ["first", "second"]


def test_store_rejects_an_invalid_queue_name() -> None:
    with pytest.raises(ValueError, match="empty"):
        store_failed_msgs("", Message(subject="x"))


def test_dequeue_removes_exactly_the_processed_rows(clock) -> None:
    for name in ("a", "b", "c", "d"):
        store_failed_msgs("q", msg(name))
    fetched = fetch_failed_msgs("q")
    assert dequeue(fetched[0].key) is True
    assert dequeue(fetched[2].key) is True
    assert subjects(fetch_failed_msgs("q")) == ["b", "d"]


def test_dequeue_of_a_missing_row_is_quiet_and_says_it_removed_nothing(clock) -> None:
    assert dequeue(keys.new_key("q")) is False


def test_remove_msg_tells_removed_from_absent(clock) -> None:
    key = store_failed_msgs("q", msg("one"))
    assert remove_msg(key) is Removal.REMOVED
    assert remove_msg(key) is Removal.ABSENT
    assert row_keys() == []


def test_remove_msg_with_the_database_unreachable_logs_and_says_failed(
    unreachable_db, caplog
) -> None:
    with caplog.at_level(logging.ERROR, logger="deadletter"):
        assert remove_msg(keys.new_key("q")) is Removal.FAILED
        assert dequeue(keys.new_key("q")) is False
    assert "dequeue failed" in caplog.text


def test_queues_never_see_each_others_rows(clock) -> None:
    store_failed_msgs("queue", msg("mine"))
    store_failed_msgs("queue-two", msg("theirs"))
    put_row(b"queue-two", [msg("their legacy")])
    assert subjects(fetch_failed_msgs("queue")) == ["mine"]
    assert subjects(fetch_failed_msgs("queue-two")) == ["their legacy", "theirs"]


def test_expired_message_is_dropped_and_its_row_gone_for_good(clock) -> None:
    store_failed_msgs("q", msg("stale", queued_at=NOW - timedelta(days=31)))
    store_failed_msgs("q", msg("fresh"))
    assert subjects(fetch_failed_msgs("q")) == ["fresh"]
    assert len(row_keys()) == 1


def test_max_age_setting_overrides_the_default(clock, settings) -> None:
    settings.DEADLETTER_MAX_QUEUE_AGE = timedelta(hours=1)
    store_failed_msgs("q", msg("two hours", queued_at=NOW - timedelta(hours=2)))
    assert fetch_failed_msgs("q") == []


def test_expired_sibling_in_a_multi_message_row_spares_the_live_one(clock) -> None:
    put_row(
        keys.new_key("q"),
        [msg("stale", queued_at=NOW - timedelta(days=40)), msg("live")],
    )
    assert subjects(fetch_failed_msgs("q")) == ["live"]
    assert len(row_keys()) == 1


def test_multi_message_row_is_split_in_place_with_unique_keys(clock) -> None:
    store_failed_msgs("q", msg("before"))
    put_row(keys.new_key("q"), [msg("first"), msg("second"), msg("third")])
    store_failed_msgs("q", msg("after"))
    fetched = fetch_failed_msgs("q")
    assert subjects(fetched) == ["before", "first", "second", "third", "after"]
    assert [q.key for q in fetched] == row_keys()


def test_dequeuing_the_first_of_a_split_row_leaves_the_second(clock) -> None:
    put_row(keys.new_key("q"), [msg("first"), msg("second")])
    first = fetch_failed_msgs("q")[0]
    dequeue(first.key)
    assert subjects(fetch_failed_msgs("q")) == ["second"]


def test_zero_queued_at_is_stamped_and_persisted_under_the_same_key(clock) -> None:
    key = keys.new_key("q")
    put_row(key, [Message(subject="never stamped")])
    (first,) = fetch_failed_msgs("q")
    clock.shift(timedelta(minutes=5))
    (second,) = fetch_failed_msgs("q")
    assert first.key == second.key == key
    assert first.msg.queued_at is not None
    assert second.msg.queued_at == first.msg.queued_at


def test_rewritten_row_keeps_every_other_field_and_unknown_key(clock) -> None:
    original = Message(
        timestamp=GoTime.parse("2026-11-27T10:00:00.123456789+01:00"),
        username="ucenik@skole.hr",
        subject="keep me",
        descriptions=["Datum"],
        fields=[],
        skip_recipients=None,
        code=4,
        extra={"Attempts": 2, "LastError": "boom"},
    )
    put_row(keys.new_key("q"), [original])
    (got,) = fetch_failed_msgs("q")
    assert got.msg.replace(queued_at=None) == original
    assert got.msg.timestamp is not None
    assert got.msg.timestamp.format() == "2026-11-27T10:00:00.123456789+01:00"


def test_legacy_row_is_split_in_order_ahead_of_existing_rows(clock) -> None:
    store_failed_msgs("q", msg("newer per-message row"))
    put_row(b"q", [msg("legacy 1"), msg("legacy 2"), Message(subject="legacy 3")])
    fetched = fetch_failed_msgs("q")
    assert subjects(fetched) == ["legacy 1", "legacy 2", "legacy 3", "newer per-message row"]
    assert b"q" not in row_keys()
    assert [q.key for q in fetched] == row_keys()


def test_refetch_after_a_legacy_split_duplicates_nothing(clock) -> None:
    put_row(b"q", [msg("a"), msg("b")])
    first = fetch_failed_msgs("q")
    assert fetch_failed_msgs("q") == first


def test_corrupt_row_is_dropped_without_raising(clock, caplog) -> None:
    QueuedMessage.objects.create(key=keys.new_key("q"), value=b"corrupted cbor data")
    store_failed_msgs("q", msg("fine"))
    with caplog.at_level(logging.ERROR, logger="deadletter"):
        assert subjects(fetch_failed_msgs("q")) == ["fine"]
    assert "corrupt" in caplog.text
    assert len(row_keys()) == 1


def test_corrupt_legacy_row_is_dropped_without_raising(clock) -> None:
    QueuedMessage.objects.create(key=b"q", value=b"\x83\xa1")
    store_failed_msgs("q", msg("fine"))
    assert subjects(fetch_failed_msgs("q")) == ["fine"]
    assert b"q" not in row_keys()


def test_legacy_row_corrupt_after_good_messages_is_dropped_with_none_of_them(clock) -> None:
    good = codec.encode([msg("old one"), msg("old two")])
    QueuedMessage.objects.create(key=b"q", value=bytes([good[0] + 1]) + good[1:] + b"\xa1")
    store_failed_msgs("q", msg("fine"))
    assert subjects(fetch_failed_msgs("q")) == ["fine"]
    assert len(row_keys()) == 1


def test_empty_row_is_deleted(clock) -> None:
    QueuedMessage.objects.create(key=keys.new_key("q"), value=b"")
    assert fetch_failed_msgs("q") == []
    assert row_keys() == []


def test_iter_reads_in_pages_the_same_as_fetch(clock) -> None:
    for i in range(25):
        store_failed_msgs("q", msg(f"m{i:02}"))
    put_row(b"q", [msg("legacy")])
    assert list(iter_failed_msgs("q", batch_size=4)) == fetch_failed_msgs("q")
    assert len(fetch_failed_msgs("q")) == 26


def test_iter_rejects_a_batch_size_below_one() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        list(iter_failed_msgs("q", batch_size=0))


def test_fetch_with_the_database_unreachable_logs_and_returns_nothing(
    unreachable_db, caplog
) -> None:
    with caplog.at_level(logging.ERROR, logger="deadletter"):
        assert fetch_failed_msgs("q") == []
    assert "fetch failed" in caplog.text


def test_store_with_the_database_unreachable_raises_queueing_error(unreachable_db) -> None:
    with pytest.raises(QueueingError):
        store_failed_msgs("q", Message(subject="x"))


def test_go_fixture_database_rows_fetch_as_the_manifest_says(manifest) -> None:
    for row in manifest["rows"]:
        QueuedMessage.objects.create(
            key=bytes.fromhex(row["key_hex"]), value=bytes.fromhex(row["value_hex"])
        )
    with time_machine.travel(manifest["generated_at"], tick=False):
        for expect in manifest["expect"]:
            fetched = fetch_failed_msgs(expect["queue"])
            wanted = expect["first_fetch"]["messages"]
            assert subjects(fetched) == [m["subject"] for m in wanted]
            for got, want in zip(fetched, wanted, strict=True):
                if want["queued_at"] == "STAMPED":
                    assert got.msg.queued_at == GoTime.parse(manifest["generated_at"])
                else:
                    assert got.msg.queued_at.format() == want["queued_at"]
            again = fetch_failed_msgs(expect["queue"])
            assert subjects(again) == expect["after_first_fetch"]["second_fetch_subjects"]
            assert len(again) == expect["after_first_fetch"]["message_row_count"]


def test_go_fixture_rows_left_alone_stay_byte_identical(manifest) -> None:
    rows = [r for r in manifest["rows"] if r["kind"] == "message_row"]
    for row in rows:
        QueuedMessage.objects.create(
            key=bytes.fromhex(row["key_hex"]), value=bytes.fromhex(row["value_hex"])
        )
    with time_machine.travel(manifest["generated_at"], tick=False):
        fetch_failed_msgs("telegram-queue")
    for row in rows:
        stored = QueuedMessage.objects.get(key=bytes.fromhex(row["key_hex"]))
        assert bytes(stored.value).hex() == row["value_hex"]


def test_async_twins_store_fetch_and_dequeue(clock) -> None:
    async def scenario() -> list[str]:
        await astore_failed_msgs("q", msg("one"))
        await astore_failed_msgs("q", msg("two"))
        fetched = await afetch_failed_msgs("q")
        assert await adequeue(fetched[0].key) is True
        assert await adequeue(fetched[0].key) is False
        left = subjects(await afetch_failed_msgs("q"))
        await sync_to_async(connections.close_all)()
        return left

    assert asyncio.run(scenario()) == ["two"]


def test_adequeue_finishes_its_delete_when_the_awaiting_task_is_cancelled(clock) -> None:
    key = store_failed_msgs("q", msg("one"))

    async def scenario() -> None:
        task = asyncio.ensure_future(adequeue(key))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await sync_to_async(connections.close_all)()

    asyncio.run(scenario())
    assert row_keys() == []


ENQUEUE_SCRIPT = """
import sys, django
django.setup()
from deadletter.wire.messages import Message
from deadletter.queue import store_failed_msgs
proc, count = sys.argv[1], int(sys.argv[2])
sys.stdin.readline()
for i in range(count):
    store_failed_msgs("shared", Message(subject=f"{proc}:{i:05}"))
"""


@pytest.mark.slow
def test_four_processes_enqueue_at_once_without_error_or_loss(subprocess_env) -> None:
    import subprocess
    import sys

    procs = [
        subprocess.Popen(
            [sys.executable, "-c", ENQUEUE_SCRIPT, str(p), "5000"],
            env=subprocess_env,
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for p in range(4)
    ]
    for p in procs:  # release them together
        p.stdin.write("go\n")
        p.stdin.flush()
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errors
    fetched = fetch_failed_msgs("shared")
    assert len(fetched) == 20_000
    assert len({q.key for q in fetched}) == 20_000
    for proc in range(4):
        mine = [q.msg.subject for q in fetched if q.msg.subject.startswith(f"{proc}:")]
        assert mine == [f"{proc}:{i:05}" for i in range(5000)]


def test_store_sends_message_enqueued_with_the_key(clock) -> None:
    from deadletter import signals

    seen: list[tuple[str, bytes]] = []

    def receiver(sender: str, key: bytes, **kwargs) -> None:
        seen.append((sender, key))

    signals.message_enqueued.connect(receiver)
    try:
        key = store_failed_msgs("q", msg("x"))
    finally:
        signals.message_enqueued.disconnect(receiver)
    assert seen == [("q", key)]


def test_expired_drop_is_signalled_once_the_row_is_gone(clock) -> None:
    from deadletter import signals

    key = store_failed_msgs("q", msg("stale", queued_at=NOW - timedelta(days=31)))
    rows_at_signal: list[list[bytes]] = []

    def receiver(sender: str, reason: str, **kwargs) -> None:
        assert reason == "expired"
        rows_at_signal.append(row_keys())

    signals.message_dropped.connect(receiver)
    try:
        fetch_failed_msgs("q")
        fetch_failed_msgs("q")
    finally:
        signals.message_dropped.disconnect(receiver)
    assert rows_at_signal == [[]]
    assert key not in row_keys()


def test_dequeue_inside_a_transaction_signals_after_the_commit(clock) -> None:
    from django.db import transaction

    from deadletter import signals

    key = store_failed_msgs("q", msg("x"))
    seen: list[bytes] = []

    def receiver(key: bytes, **kwargs) -> None:
        seen.append(key)

    signals.message_dequeued.connect(receiver)
    try:
        with transaction.atomic():
            dequeue(key)
            assert seen == []
    finally:
        signals.message_dequeued.disconnect(receiver)
    assert seen == [key]


def test_the_package_exports_the_removal_api() -> None:
    assert deadletter.Removal is Removal
    assert deadletter.remove_msg is remove_msg
    assert deadletter.aremove_msg is deadletter.queue.aremove_msg


# --- small reads and oversized rows -----------------------------------------------------


def _page_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The page statements the scan sends, recorded on their way to the database."""
    sent: list[str] = []
    real_read = sql.read

    def read(connection, statement, params):  # type: ignore[no-untyped-def]
        sent.append(statement)
        return real_read(connection, statement, params)

    monkeypatch.setattr(sql, "read", read)
    return sent


@pytest.mark.parametrize("limit", [1, 10, 50])
def test_a_limited_fetch_reads_the_oldest_messages_with_one_page_of_that_size(
    clock, monkeypatch: pytest.MonkeyPatch, limit: int
) -> None:
    for i in range(120):
        store_failed_msgs("q", msg(f"m{i:03d}"))
    sent = _page_reads(monkeypatch)
    assert subjects(fetch_failed_msgs("q", limit=limit)) == [f"m{i:03d}" for i in range(limit)]
    assert len(sent) == 1
    assert f"LIMIT {limit}" in sent[0]


def test_a_limit_beyond_the_queue_gives_all_of_it_and_zero_gives_nothing(clock) -> None:
    store_failed_msgs("q", msg("only"))
    assert subjects(fetch_failed_msgs("q", limit=100)) == ["only"]
    assert fetch_failed_msgs("q", limit=0) == []
    with pytest.raises(ValueError, match="limit"):
        fetch_failed_msgs("q", limit=-1)


def test_a_limited_fetch_counts_only_messages_it_hands_out(clock) -> None:
    store_failed_msgs("q", msg("expired", queued_at=NOW - timedelta(days=31)))
    store_failed_msgs("q", msg("live one"))
    store_failed_msgs("q", msg("live two"))
    assert subjects(fetch_failed_msgs("q", limit=2)) == ["live one", "live two"]


def test_storing_a_message_over_the_row_limit_is_refused_and_writes_nothing(
    clock, settings
) -> None:
    settings.DEADLETTER_MAX_ROW_BYTES = 1000
    with pytest.raises(QueueingError, match="over DEADLETTER_MAX_ROW_BYTES"):
        store_failed_msgs("q", msg("big", fields=["x" * 2000]))
    assert row_keys() == []


def test_a_row_over_the_limit_is_left_undecoded_for_an_operator(
    clock, settings, caplog: pytest.LogCaptureFixture
) -> None:
    store_failed_msgs("q", msg("before"))
    big = store_failed_msgs("q", msg("big", fields=["x" * 2000]))
    store_failed_msgs("q", msg("after"))
    settings.DEADLETTER_MAX_ROW_BYTES = 1000
    with caplog.at_level(logging.WARNING, logger="deadletter"):
        assert subjects(fetch_failed_msgs("q")) == ["before", "after"]
    assert "row too large" in caplog.text and big.hex() in caplog.text
    assert big in row_keys()
    assert deadletter.queue.claims.fetch_msg(big) is None
    assert big in row_keys()


# --- the queue on a database alias other than `default` -----------------------


ELSEWHERE = "deadletter_elsewhere"  # an alias no other test adds or removes


def _add_queue_alias() -> None:
    """A database alias `ELSEWHERE` beside `default` (its own test database), added as this
    module is collected so the test run creates and migrates it like any other."""
    import copy

    default = connections.settings["default"]
    config = copy.deepcopy(default)
    test_name = default.get("TEST", {}).get("NAME") or (
        "" if default["ENGINE"].endswith("sqlite3") else f"test_{default['NAME']}"
    )
    if default["ENGINE"].endswith("sqlite3"):
        config["TEST"] = {**config.get("TEST", {}), "NAME": f"{test_name or 'deadletter'}-queue"}
    else:
        config["TEST"] = {**config.get("TEST", {}), "NAME": f"{test_name}_queue"}
    connections.settings.setdefault(ELSEWHERE, config)


_add_queue_alias()


@pytest.mark.django_db(transaction=True, databases=["default", ELSEWHERE])
def test_the_queue_lives_wholly_on_deadletter_database(settings) -> None:
    from django.db import transaction

    from deadletter.drain import Drainer

    settings.DEADLETTER_DATABASE = ELSEWHERE
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.ok_handler"}
    first = store_failed_msgs("q", msg("first"))
    with transaction.atomic(using=ELSEWHERE):
        store_failed_msgs("q", msg("second"))
    store_failed_msgs("q", msg("third"))
    assert subjects(fetch_failed_msgs("q")) == ["first", "second", "third"]
    assert not QueuedMessage.objects.exists()  # nothing on `default`
    assert QueuedMessage.objects.using(ELSEWHERE).count() == 3
    assert dequeue(first)
    assert remove_msg(first) is Removal.ABSENT
    assert Drainer(["q"]).run().delivered == 2
    assert fetch_failed_msgs("q") == []
    assert not QueuedMessage.objects.using(ELSEWHERE).exists()


def test_a_limited_fetch_meeting_a_legacy_row_splits_it_and_gives_the_oldest(clock) -> None:
    put_row(b"q", [msg("a"), msg("b"), msg("c")])
    assert subjects(fetch_failed_msgs("q", limit=2)) == ["a", "b"]
    assert len(row_keys()) == 3


# --- a first failure in the future ----------------------------------------------


@pytest.mark.parametrize(
    "queued_at",
    [NOW + timedelta(minutes=5, seconds=1), GoTime.parse("9999-12-15T00:00:00Z")],
    ids=["just past the skew", "year 9999"],
)
def test_store_refuses_a_first_failure_in_the_future_and_writes_nothing(
    clock, queued_at: datetime
) -> None:
    with pytest.raises(QueueingError, match=r"^problem with persistent queue: queued_at .* future"):
        store_failed_msgs("q", msg("ahead", queued_at=queued_at))
    assert row_keys() == []


def test_store_refuses_it_inside_a_callers_transaction_too(clock) -> None:
    from django.db import transaction

    with transaction.atomic(), pytest.raises(QueueingError, match="future"):
        store_failed_msgs("q", msg("ahead", queued_at=NOW + timedelta(days=1)))
    assert row_keys() == []


def test_store_takes_a_first_failure_within_the_clock_skew(clock) -> None:
    key = store_failed_msgs("q", msg("a little ahead", queued_at=NOW + timedelta(minutes=4)))
    assert subjects(fetch_failed_msgs("q")) == ["a little ahead"]
    assert row_keys() == [key]
