from __future__ import annotations

import contextlib
import logging

import pytest
from django.db import IntegrityError, connection, transaction
from django.dispatch import Signal

from deadletter.models import QueuedMessage
from deadletter.store import sql
from deadletter.wire import keys
from tests.factories import raw_sql

pytestmark = pytest.mark.django_db(transaction=True)

TABLE = QueuedMessage._meta.db_table
INSERT = raw_sql("INSERT INTO {table} ({key}, value) VALUES (%s, %s)")


def test_a_failed_write_inside_a_transaction_leaves_the_transaction_usable() -> None:
    key = keys.new_key("q")
    with transaction.atomic():
        sql.write(connection, INSERT, (key, b""))
        with pytest.raises(IntegrityError):
            sql.write(connection, INSERT, (key, b""))
        sql.write(connection, INSERT, (keys.new_key("q"), b""))
    assert QueuedMessage.objects.count() == 2


def test_write_outside_a_transaction_commits_at_once() -> None:
    assert sql.write(connection, INSERT, (keys.new_key("q"), b"\x80")) == 1
    assert sql.read(connection, f"SELECT value FROM {TABLE}", ()) == [(b"\x80",)]


def test_a_failed_write_outside_a_transaction_raises_djangos_error_and_leaves_no_cursor() -> None:
    key = keys.new_key("q")
    sql.write(connection, INSERT, (key, b""))
    with pytest.raises(IntegrityError):
        sql.write(connection, INSERT, (key, b""))
    assert sql.write(connection, INSERT, (keys.new_key("q"), b"")) == 1
    assert QueuedMessage.objects.count() == 2


def test_after_commit_waits_for_the_commit() -> None:
    signal = Signal()
    seen: list[str] = []
    signal.connect(lambda sender, **kw: seen.append(sender), weak=False)
    with transaction.atomic():
        sql.after_commit(connection, signal, sender="q")
        assert seen == []
    assert seen == ["q"]


def test_a_raising_receiver_is_logged_not_raised(caplog) -> None:
    signal = Signal()

    def broken(sender: str, **kwargs: object) -> None:
        raise RuntimeError("receiver bug")

    signal.connect(broken, weak=False)
    sql.after_commit(connection, signal, sender="q")
    assert "receiver bug" in caplog.text


# --- every statement visible to Django when anyone is looking ---------------

HANDLERS = {"q": "tests.factories.ok_handler"}


class Seen:
    """An `execute_wrapper` noting every statement on the queue table."""

    def __init__(self) -> None:
        self.statements: list[str] = []

    def __call__(self, execute, sql_text, params, many, context):  # type: ignore[no-untyped-def]
        if QueuedMessage._meta.db_table in sql_text:
            self.statements.append(sql_text.split()[0].upper())
        return execute(sql_text, params, many, context)


def _park_fetch_dequeue_drain(settings, seen: Seen, *, in_atomic: bool) -> None:
    from deadletter.drain import Drainer
    from deadletter.queue import dequeue, fetch_failed_msgs, store_failed_msgs
    from deadletter.wire.messages import Message

    settings.DEADLETTER_HANDLERS = HANDLERS
    block = transaction.atomic if in_atomic else contextlib.nullcontext
    with connection.execute_wrapper(seen):
        with block():
            store_failed_msgs("q", Message(subject="one"))
            store_failed_msgs("q", Message(subject="two"))
        assert "INSERT" in seen.statements
        seen.statements.clear()
        with block():
            items = fetch_failed_msgs("q")
        assert [i.msg.subject for i in items] == ["one", "two"]
        assert seen.statements == ["SELECT"]
        seen.statements.clear()
        with block():
            assert dequeue(items[0].key)
        assert seen.statements == ["DELETE"]
        seen.statements.clear()
        report = Drainer(["q"]).run()
        assert report.delivered == 1
        assert "DELETE" in seen.statements
        assert "SELECT" in seen.statements


def test_an_execute_wrapper_sees_store_fetch_dequeue_and_drain_outside_a_transaction(
    settings,
) -> None:
    _park_fetch_dequeue_drain(settings, Seen(), in_atomic=False)


def test_an_execute_wrapper_sees_store_fetch_dequeue_and_drain_inside_atomic(settings) -> None:
    _park_fetch_dequeue_drain(settings, Seen(), in_atomic=True)


def test_a_store_is_one_statement_and_a_dequeue_one(django_assert_num_queries) -> None:
    from deadletter.queue import dequeue, store_failed_msgs
    from deadletter.wire.messages import Message

    with django_assert_num_queries(1) as captured:
        key = store_failed_msgs("q", Message(subject="counted"))
    assert captured.captured_queries[0]["sql"].startswith("INSERT")
    with django_assert_num_queries(1) as captured:
        assert dequeue(key)
    assert captured.captured_queries[0]["sql"].startswith("DELETE")


def test_debug_logging_sees_the_driver_path_statements(caplog) -> None:
    with caplog.at_level(logging.DEBUG, logger="django.db.backends"):
        connection.force_debug_cursor = True
        try:
            sql.write(connection, INSERT, (keys.new_key("q"), b"\x80"))
            sql.read(connection, f"SELECT value FROM {TABLE}", ())
        finally:
            connection.force_debug_cursor = False
    logged = [r.getMessage() for r in caplog.records if r.name == "django.db.backends"]
    assert any("INSERT" in line for line in logged)
    assert any("SELECT value" in line for line in logged)


def test_watched_is_a_wrapper_or_query_logging_and_nothing_else() -> None:
    assert not sql.watched(connection)
    with connection.execute_wrapper(Seen()):
        assert sql.watched(connection)
    connection.force_debug_cursor = True
    try:
        assert sql.watched(connection)
    finally:
        connection.force_debug_cursor = False
    assert not sql.watched(connection)


def test_the_table_name_is_the_models_own() -> None:
    assert sql.table() == QueuedMessage._meta.db_table
    assert QueuedMessage._meta.db_table == sql.TABLE  # kept for importers


def test_a_statement_names_the_models_table_quoted_for_the_backend(monkeypatch) -> None:
    template = "DELETE FROM {table} WHERE {key} = %s"
    key = connection.ops.quote_name("key")
    assert sql.statement(connection, template) == (
        f"DELETE FROM {connection.ops.quote_name(QueuedMessage._meta.db_table)} WHERE {key} = %s"
    )
    monkeypatch.setattr(QueuedMessage._meta, "db_table", "elsewhere")
    assert sql.statement(connection, template) == (
        f"DELETE FROM {connection.ops.quote_name('elsewhere')} WHERE {key} = %s"
    )


def _pragma(name: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"PRAGMA {name}")
        return int(cursor.fetchone()[0])


@pytest.mark.parametrize(
    ("name", "value", "inside"), [("mmap_size", "0", 0), ("secure_delete", "FAST", 2)]
)
def test_a_pragma_is_set_for_the_block_and_the_connections_own_value_put_back(
    name: str, value: str, inside: int
) -> None:
    if connection.vendor != "sqlite":
        pytest.skip("SQLite pragmas")
    before = _pragma(name)
    restore = (lambda v: "FAST" if v == 2 else str(v)) if name == "secure_delete" else str
    with sql.sqlite_pragma(connection, name, value, restore=restore):
        assert _pragma(name) == inside
    assert _pragma(name) == before
