"""A parked message survives the caller's transaction: rolled back by a view
under ATOMIC_REQUESTS, by nested atomic() blocks, on the queue's own database
or sharing the caller's, on SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
import copy
import logging
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, connections, transaction
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import path

from deadletter import signals
from deadletter.drain import Drainer
from deadletter.models import QueuedMessage
from deadletter.queue import fetch_failed_msgs, store_failed_msgs
from deadletter.store import detached, spool
from deadletter.wire import keys
from deadletter.wire.messages import Message
from tests.factories import REPO, parked, raw_sql

OWN = "deadletter_own"


class DeliveryFailed(Exception):
    pass


def park_and_reraise(request: HttpRequest) -> HttpResponse:
    """What a webhook view does when delivery fails: park the message, re-raise.
    It also writes a row of its own, which the rollback must take away."""
    QueuedMessage.objects.create(key=keys.new_key("side-effect"), value=b"\xa0")
    try:
        raise DeliveryFailed("webhook answered 502")
    except DeliveryFailed:
        store_failed_msgs("q", Message(subject=request.GET["subject"]))
        raise


urlpatterns = [path("park/", park_and_reraise)]


def rows_of(queue: str, alias: str = "default") -> int:
    low, high = keys.queue_bounds(queue)
    return QueuedMessage.objects.using(alias).filter(key__gte=low, key__lt=high).count()


def rows_seen_by(connection: Any, queue: str = "q") -> int:
    """Rows of `queue` as `connection` sees them now, in its own transaction."""
    low, high = keys.queue_bounds(queue)
    with connection.cursor() as cursor:
        cursor.execute(
            raw_sql("SELECT COUNT(*) FROM {table} WHERE {key} >= %s AND {key} < %s"),
            (low, high),
        )
        return int(cursor.fetchone()[0])


def seen_from_another_connection(alias: str, queue: str = "q") -> int:
    """Rows of `queue` as a second connection sees them now: committed rows only."""
    other = connections.create_connection(alias)
    try:
        return rows_seen_by(other, queue)
    finally:
        other.close()


@pytest.fixture
def atomic_requests(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """ATOMIC_REQUESTS on the default database for one test."""
    monkeypatch.setitem(connections.settings["default"], "ATOMIC_REQUESTS", True)
    yield


@pytest.fixture(scope="module", autouse=True)
def own_alias(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A second alias for the queue: its own SQLite file (migrated), or on
    PostgreSQL the test database again (a connection of its own). Added before
    the tests' database set-up runs, so they can name it in `databases`."""
    own = copy.deepcopy(connections["default"].settings_dict)
    sqlite = connections["default"].vendor == "sqlite"
    if sqlite:
        own["NAME"] = str(tmp_path_factory.mktemp("own") / "queue.sqlite3")
    connections.settings[OWN] = own
    if sqlite:
        with django_db_blocker.unblock():
            call_command("migrate", database=OWN, verbosity=0)
    yield OWN
    connections[OWN].close()
    del connections[OWN]
    del connections.settings[OWN]


@pytest.fixture
def own_database(settings: Any) -> str:
    """The queue on the second alias for one test."""
    settings.DEADLETTER_DATABASE = OWN
    return OWN


# --- ATOMIC_REQUESTS ----------------------------------------------------------


@pytest.mark.urls(__name__)
@pytest.mark.django_db(transaction=True)
def test_a_view_under_atomic_requests_that_parks_and_reraises_keeps_the_message(
    atomic_requests: None,
) -> None:
    response = Client(raise_request_exception=False).get("/park/", {"subject": "order 7"})
    assert response.status_code == 500
    assert parked() == ["order 7"]
    assert rows_of("side-effect") == 0  # the view's own write was rolled back


@pytest.mark.urls(__name__)
@pytest.mark.django_db(transaction=True, databases=["default", OWN])
def test_the_view_keeps_the_message_with_the_queue_on_its_own_database(
    atomic_requests: None, own_database: str
) -> None:
    response = Client(raise_request_exception=False).get("/park/", {"subject": "order 8"})
    assert response.status_code == 500
    assert parked() == ["order 8"]
    assert rows_of("side-effect") == 0


@pytest.mark.urls(__name__)
@pytest.mark.django_db(transaction=True, databases=["default", OWN])
def test_the_view_keeps_the_message_when_the_own_database_is_atomic_too(
    atomic_requests: None, own_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(connections.settings[OWN], "ATOMIC_REQUESTS", True)
    response = Client(raise_request_exception=False).get("/park/", {"subject": "order 9"})
    assert response.status_code == 500
    assert parked() == ["order 9"]


# --- nested atomic() ----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_message_parked_in_nested_blocks_that_all_roll_back_is_kept() -> None:
    with pytest.raises(DeliveryFailed), transaction.atomic(), transaction.atomic():
        store_failed_msgs("q", Message(subject="inner"))
        raise DeliveryFailed
    assert parked() == ["inner"]


@pytest.mark.django_db(transaction=True)
def test_an_inner_rollback_inside_an_outer_commit_keeps_the_message_once() -> None:
    with transaction.atomic():
        with pytest.raises(DeliveryFailed), transaction.atomic():
            store_failed_msgs("q", Message(subject="once"))
            raise DeliveryFailed
        store_failed_msgs("q", Message(subject="twice"))
    assert parked() == ["once", "twice"]


@pytest.mark.django_db(transaction=True)
def test_an_inner_commit_inside_an_outer_rollback_keeps_the_message() -> None:
    with pytest.raises(DeliveryFailed), transaction.atomic():
        with transaction.atomic():
            key = store_failed_msgs("q", Message(subject="kept"))
        raise DeliveryFailed
    assert [q.key for q in fetch_failed_msgs("q")] == [key]


@pytest.mark.django_db(transaction=True)
def test_set_rollback_does_not_take_the_message_along() -> None:
    with transaction.atomic():
        store_failed_msgs("q", Message(subject="kept"))
        transaction.set_rollback(True)
    assert parked() == ["kept"]


@pytest.mark.django_db(transaction=True, databases=["default", OWN])
def test_nested_blocks_on_the_queues_own_database_commit_at_once(own_database: str) -> None:
    with pytest.raises(DeliveryFailed), transaction.atomic(), transaction.atomic():
        store_failed_msgs("q", Message(subject="own"))
        assert seen_from_another_connection(OWN) == 1
        raise DeliveryFailed
    assert parked() == ["own"]


@pytest.mark.django_db(transaction=True, databases=["default", OWN])
def test_a_block_on_the_queues_own_database_itself_keeps_the_message(own_database: str) -> None:
    with pytest.raises(DeliveryFailed), transaction.atomic(using=OWN):
        store_failed_msgs("q", Message(subject="own block"))
        raise DeliveryFailed
    assert parked() == ["own block"]


# --- per backend ----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_on_a_database_server_the_store_commits_before_the_callers_transaction_ends() -> None:
    if connection.vendor == "sqlite":
        pytest.skip("PostgreSQL and MySQL write on a second connection")
    with transaction.atomic():
        store_failed_msgs("q", Message(subject="now"))
        assert seen_from_another_connection("default") == 1


@pytest.mark.django_db(transaction=True)
def test_on_a_database_server_a_broken_callers_transaction_still_parks() -> None:
    if connection.vendor == "sqlite":
        pytest.skip("PostgreSQL and MySQL: a failed statement breaks the transaction")
    from django.db import DatabaseError

    with pytest.raises(DeliveryFailed), transaction.atomic():
        with pytest.raises(DatabaseError), connection.cursor() as cursor:
            cursor.execute("SELECT * FROM no_such_table")
        store_failed_msgs("q", Message(subject="after a failed statement"))
        raise DeliveryFailed
    assert parked() == ["after a failed statement"]


@pytest.mark.django_db(transaction=True)
def test_on_a_database_server_the_second_connection_is_reused_and_closed_with_the_callers() -> None:
    if connection.vendor == "sqlite":
        pytest.skip("PostgreSQL and MySQL write on a second connection")
    caller = connections["default"]
    with transaction.atomic():
        store_failed_msgs("q", Message(subject="one"))
        private = detached.private_connection(caller)
        raw = private.connection
        assert raw is not None
    with transaction.atomic():
        store_failed_msgs("q", Message(subject="two"))
    assert private.connection is raw  # no connect per parked message
    caller.close()
    assert private.connection is None
    assert parked() == ["one", "two"]


@pytest.mark.django_db(transaction=True)
def test_the_second_connection_follows_django_at_the_end_of_a_request() -> None:
    if connection.vendor == "sqlite":
        pytest.skip("PostgreSQL and MySQL write on a second connection")
    from django.core.signals import request_finished

    with transaction.atomic():
        store_failed_msgs("q", Message(subject="x"))
    private = detached.private_connection(connections["default"])
    assert private.connection is not None
    request_finished.send(sender=None)
    assert private.connection is None  # CONN_MAX_AGE = 0: closed, as Django closes its own


@pytest.mark.django_db(transaction=True)
def test_on_sqlite_sharing_the_file_the_message_is_written_when_the_transaction_ends() -> None:
    if connection.vendor != "sqlite":
        pytest.skip("SQLite: the caller holds the write lock")
    with transaction.atomic():
        key = store_failed_msgs("q", Message(subject="later"))
        assert rows_seen_by(connections["default"]) == 0
    assert [q.key for q in fetch_failed_msgs("q")] == [key]


@pytest.mark.django_db(transaction=True)
def test_a_connection_closed_inside_the_transaction_still_gets_the_message() -> None:
    with transaction.atomic():
        store_failed_msgs("q", Message(subject="closed"))
        connection.close()
    assert parked() == ["closed"]


@pytest.mark.django_db(transaction=True)
def test_message_enqueued_is_sent_once_the_row_is_written() -> None:
    sent: list[bytes] = []

    def receiver(sender: str, key: bytes, **kwargs: Any) -> None:
        sent.append(key)

    signals.message_enqueued.connect(receiver)
    try:
        with pytest.raises(DeliveryFailed), transaction.atomic():
            key = store_failed_msgs("q", Message(subject="x"))
            raise DeliveryFailed
    finally:
        signals.message_enqueued.disconnect(receiver)
    assert sent == [key]


# --- inside a test case's transaction -------------------------------------------


@pytest.mark.django_db
def test_inside_a_test_case_a_rolled_back_block_keeps_the_message() -> None:
    with pytest.raises(DeliveryFailed), transaction.atomic():
        store_failed_msgs("q", Message(subject="test case"))
        raise DeliveryFailed
    assert parked() == ["test case"]


@pytest.mark.django_db
def test_inside_a_test_case_a_store_outside_any_block_is_seen_at_once() -> None:
    store_failed_msgs("q", Message(subject="direct"))
    assert parked() == ["direct"]


# --- the opposite, for a caller who wants it --------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_caller_who_wants_the_message_tied_to_the_transaction_parks_on_commit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def park() -> None:
        store_failed_msgs("q", Message(subject="only if committed"))

    with pytest.raises(DeliveryFailed), transaction.atomic():
        transaction.on_commit(park)
        raise DeliveryFailed
    assert parked() == []
    with transaction.atomic():
        transaction.on_commit(park)
    assert parked() == ["only if committed"]
    with caplog.at_level(logging.ERROR, logger="deadletter"):
        assert "not written" not in caplog.text


# --- a manual transaction (set_autocommit(False)) counts as one -------------------


@pytest.mark.django_db(transaction=True)
def test_a_manual_transaction_rolled_back_keeps_the_message() -> None:
    transaction.set_autocommit(False)
    try:
        QueuedMessage.objects.create(key=keys.new_key("side-effect"), value=b"\xa0")
        key = store_failed_msgs("q", Message(subject="manual"))
        transaction.rollback()
    finally:
        transaction.set_autocommit(True)
    assert [q.key for q in fetch_failed_msgs("q")] == [key]
    assert rows_of("side-effect") == 0


@pytest.mark.django_db(transaction=True)
def test_a_manual_transaction_still_open_does_not_hold_the_message_back_on_a_server() -> None:
    if connection.vendor == "sqlite":
        pytest.skip("PostgreSQL and MySQL write on a second connection")
    transaction.set_autocommit(False)
    try:
        store_failed_msgs("q", Message(subject="seen by others"))
        assert seen_from_another_connection("default") == 1
        transaction.rollback()
    finally:
        transaction.set_autocommit(True)
    assert parked() == ["seen by others"]


@pytest.mark.django_db(transaction=True)
def test_a_manual_commit_writes_the_message_and_the_callers_rows_alike() -> None:
    transaction.set_autocommit(False)
    try:
        QueuedMessage.objects.create(key=keys.new_key("side-effect"), value=b"\xa0")
        store_failed_msgs("q", Message(subject="first"))
        transaction.commit()
        store_failed_msgs("q", Message(subject="second"))
        transaction.rollback()
    finally:
        transaction.set_autocommit(True)
    assert parked() == ["first", "second"]
    assert rows_of("side-effect") == 1


# --- SQLite: a held-back park is durable at once (the spool) -----------------------


@pytest.fixture
def deferred_sqlite() -> Iterator[None]:
    """Django's default DEFERRED transactions and a 0.3 s busy timeout on the
    default SQLite connection, so another writer can hold the lock past it."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite holds the park back until the caller's block ends")
    options = connection.settings_dict["OPTIONS"]
    saved = dict(options)
    options.pop("transaction_mode", None)
    options["timeout"] = 0.3
    connection.close()
    yield
    connection.close()
    options.clear()
    options.update(saved)
    for private in detached._local.__dict__.get("wrappers", {}).values():
        private.close()


@contextlib.contextmanager
def write_lock_held() -> Iterator[None]:
    """Another writer holding the database file's write lock."""
    import sqlite3

    other = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        other.execute("ROLLBACK")
        other.close()


def spool_files() -> list[str]:
    folder = spool.directory(connection)
    assert folder is not None
    return sorted(p.name for p in folder.glob("*.spool")) if folder.exists() else []


@pytest.mark.django_db(transaction=True)
def test_a_held_back_park_whose_write_fails_at_block_end_is_written_by_the_next_fetch(
    deferred_sqlite: None, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="deadletter"), write_lock_held():
        with transaction.atomic():
            key = store_failed_msgs("q", Message(subject="kept"))
            assert len(spool_files()) == 1
        assert seen_from_another_connection("default") == 0
        assert len(spool_files()) == 1
    assert "kept in" in caplog.text and ".spool" in caplog.text
    assert [q.key for q in fetch_failed_msgs("q")] == [key]
    assert spool_files() == []


@pytest.mark.django_db(transaction=True)
def test_a_park_spooled_is_written_once_the_lock_is_free_even_by_the_next_store(
    deferred_sqlite: None,
) -> None:
    with write_lock_held(), transaction.atomic():
        first = store_failed_msgs("q", Message(subject="first"))
    second = store_failed_msgs("q", Message(subject="second"))
    assert seen_from_another_connection("default") == 2
    assert [q.key for q in fetch_failed_msgs("q")] == [first, second]


CHILD = """
import sys, time, django
from django.conf import settings
django.setup()
options = settings.DATABASES["default"]["OPTIONS"]
options.pop("transaction_mode", None)  # Django's default, DEFERRED
options["timeout"] = float(sys.argv[2])
from django.db import transaction
from deadletter import Message, store_failed_msgs
with transaction.atomic():
    key = store_failed_msgs("q", Message(subject=sys.argv[1]))
    print(key.hex(), flush=True)
    if sys.argv[1] == "killed":
        time.sleep(60)
"""


def child(env: dict[str, str], subject: str, busy_timeout: float = 30) -> subprocess.Popen[str]:
    """A process that parks inside its own atomic block on the test database."""
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, subject, str(busy_timeout)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_a_process_killed_inside_its_block_keeps_its_parked_message(
    subprocess_env: dict[str, str],
) -> None:
    if connection.vendor != "sqlite":
        pytest.skip("SQLite holds the park back until the caller's block ends")
    proc = child(subprocess_env, "killed")
    assert proc.stdout is not None
    key = bytes.fromhex(proc.stdout.readline().strip())
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert seen_from_another_connection("default") == 0
    assert [q.key for q in fetch_failed_msgs("q")] == [key]
    assert [q.key for q in fetch_failed_msgs("q")] == [key]


@pytest.mark.slow
def test_a_process_that_exits_while_another_writer_holds_the_lock_keeps_its_message(
    subprocess_env: dict[str, str],
) -> None:
    if connection.vendor != "sqlite":
        pytest.skip("SQLite holds the park back until the caller's block ends")
    with write_lock_held():
        proc = child(subprocess_env, "exited", busy_timeout=0.3)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    assert "for the next store, fetch or drain" in err
    key = bytes.fromhex(out.strip())
    assert [q.key for q in fetch_failed_msgs("q")] == [key]


delivered: list[str] = []


def recording_handler(msg: Message) -> None:
    delivered.append(msg.subject)


@pytest.mark.slow
def test_a_drain_of_a_queue_with_no_rows_delivers_what_a_killed_process_left_in_the_spool(
    subprocess_env: dict[str, str], settings: Any
) -> None:
    if connection.vendor != "sqlite":
        pytest.skip("SQLite holds the park back until the caller's block ends")
    settings.DEADLETTER_HANDLERS = {"q": "tests.store.test_detached.recording_handler"}
    delivered.clear()
    proc = child(subprocess_env, "killed")
    assert proc.stdout is not None
    proc.stdout.readline()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert rows_of("q") == 0 and len(spool_files()) == 1
    report = Drainer(["q"]).run()
    assert (report.delivered, delivered) == (1, ["killed"])
    assert spool_files() == []
