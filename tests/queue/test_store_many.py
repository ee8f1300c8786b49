"""`store_failed_msgs(queue, [...])`: a list parked in one transaction, every
message or none, keys strictly increasing in the list's order, and kept when the
caller's transaction rolls back, as a single park is (issue 44, point 10)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction

from deadletter import QueueingError, astore_failed_msgs, signals, store_failed_msgs
from deadletter.models import QueuedMessage
from deadletter.queue import fetch_failed_msgs
from deadletter.store import spool
from deadletter.wire import codec, keys
from deadletter.wire.messages import Message
from tests.factories import REPO, parked, raw_sql


def messages(*subjects: str) -> list[Message]:
    return [Message(subject=subject) for subject in subjects]


def committed_rows() -> int:
    """Rows of the queue table as another connection sees them: committed ones only."""
    from django.db import connections

    other = connections.create_connection(connection.alias)
    try:
        with other.cursor() as cursor:
            cursor.execute(raw_sql("SELECT COUNT(*) FROM {table}"))
            return int(cursor.fetchone()[0])
    finally:
        other.close()


@pytest.mark.django_db
def test_a_list_is_parked_in_its_order_under_strictly_increasing_keys() -> None:
    handed = store_failed_msgs("q", messages("a", "b", "c", "d"))
    assert len(handed) == 4
    assert handed == sorted(handed) and len(set(handed)) == 4
    assert all(keys.queue_of(key) == "q" for key in handed)
    assert [item.key for item in fetch_failed_msgs("q")] == handed
    assert parked("q") == ["a", "b", "c", "d"]


@pytest.mark.django_db
def test_a_tuple_parks_too_and_an_empty_list_parks_nothing() -> None:
    assert store_failed_msgs("q", ()) == []
    assert len(store_failed_msgs("q", tuple(messages("x", "y")))) == 2
    assert parked("q") == ["x", "y"]


@pytest.mark.django_db
def test_the_list_stamps_queued_at_and_keeps_one_already_set() -> None:
    first = (datetime.now(UTC) - timedelta(days=1)).replace(microsecond=0)
    store_failed_msgs("q", [Message(subject="new"), Message(subject="old", queued_at=first)])
    new, old = (item.msg for item in fetch_failed_msgs("q"))
    assert new.queued_at is not None and new.queued_at > first
    assert old.queued_at == first


@pytest.mark.django_db
def test_a_message_that_cannot_be_parked_leaves_none_of_the_list_and_is_named() -> None:
    future = datetime.now(UTC) + timedelta(days=2)
    bad = [*messages("a", "b"), Message(subject="c", queued_at=future), *messages("d")]
    with pytest.raises(QueueingError, match="message 2"):
        store_failed_msgs("q", bad)
    assert QueuedMessage.objects.count() == 0


@pytest.mark.django_db
def test_something_other_than_a_list_of_messages_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        store_failed_msgs("q", "not a message")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="message 1"):
        store_failed_msgs("q", [Message(subject="a"), {"subject": "b"}])  # type: ignore[list-item]
    assert QueuedMessage.objects.count() == 0


@pytest.fixture
def refuse_the_third_row(transactional_db: None) -> Iterator[None]:
    """A trigger that fails any INSERT into the queue table once it holds two rows
    (counting those of the INSERT's own transaction): a real failure mid-list."""
    table = raw_sql("{table}")
    if connection.vendor == "sqlite":
        create = [
            f"CREATE TRIGGER dl_refuse_third BEFORE INSERT ON {table} "
            f"WHEN (SELECT COUNT(*) FROM {table}) >= 2 "
            "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
        ]
        drop = ["DROP TRIGGER IF EXISTS dl_refuse_third"]
    elif connection.vendor == "postgresql":
        create = [
            "CREATE FUNCTION dl_refuse_third() RETURNS trigger AS $$ BEGIN "
            f"IF (SELECT COUNT(*) FROM {table}) >= 2 THEN "
            "RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$ "
            "LANGUAGE plpgsql",
            f"CREATE TRIGGER dl_refuse_third BEFORE INSERT ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION dl_refuse_third()",
        ]
        drop = [
            f"DROP TRIGGER IF EXISTS dl_refuse_third ON {table}",
            "DROP FUNCTION IF EXISTS dl_refuse_third()",
        ]
    else:
        create = [
            f"CREATE TRIGGER dl_refuse_third BEFORE INSERT ON {table} FOR EACH ROW BEGIN "
            f"IF (SELECT COUNT(*) FROM {table}) >= 2 THEN "
            "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by the test'; END IF; END"
        ]
        drop = ["DROP TRIGGER IF EXISTS dl_refuse_third"]
    with connection.cursor() as cursor:
        for statement in create:
            cursor.execute(statement)
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            for statement in drop:
                cursor.execute(statement)


def test_a_database_failure_mid_list_leaves_none_of_it(refuse_the_third_row: None) -> None:
    with pytest.raises(QueueingError):
        store_failed_msgs("q", messages("a", "b", "c", "d"))
    assert committed_rows() == 0
    assert len(store_failed_msgs("q", messages("a", "b"))) == 2  # the rule lets two in
    assert committed_rows() == 2


@pytest.mark.django_db(transaction=True)
def test_a_list_parked_inside_a_transaction_that_rolls_back_is_kept_whole() -> None:
    class Failed(Exception):
        pass

    with pytest.raises(Failed), transaction.atomic():
        QueuedMessage.objects.create(key=keys.new_key("side-effect"), value=b"\xa0")
        handed = store_failed_msgs("q", messages("a", "b", "c"))
        raise Failed
    assert committed_rows() == 3
    assert [item.key for item in fetch_failed_msgs("q")] == handed
    assert parked("side-effect") == []


@pytest.mark.django_db(transaction=True)
def test_a_list_parked_inside_a_manual_transaction_rolled_back_is_kept() -> None:
    connection.set_autocommit(False)
    try:
        handed = store_failed_msgs("q", messages("a", "b"))
        connection.rollback()
    finally:
        connection.set_autocommit(True)
    assert [item.key for item in fetch_failed_msgs("q")] == handed


@pytest.mark.django_db(transaction=True)
def test_message_enqueued_is_sent_for_each_message_once_the_list_is_written() -> None:
    seen: list[tuple[bytes, str]] = []

    def receiver(sender: str, key: bytes, msg: Message, **kwargs: object) -> None:
        seen.append((key, msg.subject))
        assert msg.queued_at is not None

    signals.message_enqueued.connect(receiver)
    try:
        with transaction.atomic():
            handed = store_failed_msgs("q", messages("a", "b"))
            if connection.vendor == "sqlite":
                assert seen == []  # written, and announced, when the block ends
        assert seen == list(zip(handed, ["a", "b"], strict=True))
    finally:
        signals.message_enqueued.disconnect(receiver)


@pytest.mark.django_db(transaction=True)
def test_the_async_twin_takes_a_list() -> None:
    handed = asyncio.run(astore_failed_msgs("q", messages("a", "b")))
    assert isinstance(handed, list) and len(handed) == 2
    assert parked("q") == ["a", "b"]


# --- SQLite: the list held back is one spool record --------------------------


def spool_folder():  # type: ignore[no-untyped-def]
    folder = spool.directory(connection)
    if folder is None:
        pytest.skip("an in-memory SQLite database has no spool")
    return folder


def stamped(subject: str) -> bytes:
    return codec.encode_one(Message(subject=subject), time.time_ns())


@pytest.mark.django_db(transaction=True)
def test_on_sqlite_a_list_held_back_is_one_spool_record_in_a_batch_file() -> None:
    if connection.vendor != "sqlite":
        pytest.skip("SQLite holds the park back until the caller's block ends")
    folder = spool_folder()
    with transaction.atomic():
        handed = store_failed_msgs("q", messages("a", "b", "c"))
        files = list(folder.glob("*" + spool.BATCH))
        assert len(files) == 1
        records = spool.read_records(files[0].read_bytes())
        assert [(queue, key) for queue, key, _ in records] == [("q", key) for key in handed]
        assert files[0].read_bytes().count(b"q") >= 3
    assert list(folder.glob("*" + spool.BATCH)) == []
    assert [item.key for item in fetch_failed_msgs("q")] == handed


@pytest.mark.django_db(transaction=True)
def test_a_torn_batch_record_recovers_none_of_its_list_and_a_whole_one_all() -> None:
    if connection.vendor != "sqlite":
        pytest.skip("the spool is SQLite's")
    folder = spool_folder()
    folder.mkdir(exist_ok=True)
    torn = [("q", keys.new_key(b"q"), stamped(s)) for s in ("t1", "t2", "t3")]
    whole = [("q", keys.new_key(b"q"), stamped(s)) for s in ("w1", "w2")]
    record = spool.encode_batch(torn)
    (folder / ("1-1-1" + spool.BATCH)).write_bytes(record[: len(record) - 5])
    (folder / ("1-1-2" + spool.BATCH)).write_bytes(spool.encode_batch(whole))
    assert parked("q") == ["w1", "w2"]
    assert [p for p in folder.iterdir() if p.name.endswith(spool.NAMES)] == []


CHILD = """
import sys, time, django
django.setup()
from django.db import transaction
from deadletter import Message, store_failed_msgs
with transaction.atomic():
    handed = store_failed_msgs("q", [Message(subject=s) for s in ("a", "b", "c")])
    print(" ".join(key.hex() for key in handed), flush=True)
    time.sleep(60)
"""


@pytest.mark.slow
def test_a_process_killed_inside_its_block_keeps_its_whole_list(
    subprocess_env: dict[str, str],
) -> None:
    if connection.vendor != "sqlite":
        pytest.skip("SQLite holds the park back until the caller's block ends")
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        cwd=REPO,
        env=subprocess_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    handed = [bytes.fromhex(text) for text in proc.stdout.readline().split()]
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert len(handed) == 3 and committed_rows() == 0
    assert [item.key for item in fetch_failed_msgs("q")] == handed
    assert parked("q") == ["a", "b", "c"]
