from __future__ import annotations

import contextlib
import io
import logging

import pytest
from django.db import DatabaseError, IntegrityError, connection, transaction
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


# --- every statement through Django's cursor -----------------------------------

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


def test_debug_logging_sees_every_statement(caplog) -> None:
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


def test_the_table_name_is_the_models_own() -> None:
    assert sql.table() == QueuedMessage._meta.db_table
    assert not hasattr(sql, "TABLE")  # one way to name it


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


def test_insert_new_leaves_a_present_key_as_it_is_and_counts_what_went_in() -> None:
    present, fresh = keys.new_key("q"), keys.new_key("q")
    sql.write(connection, INSERT, (present, b"\x80"))
    with transaction.atomic(), connection.cursor() as cursor:
        rows = [(present, b"\x81"), (fresh, b"\x82")]
        assert sql.insert_new(connection, cursor, TABLE, ("key", "value"), rows) == 1
        assert sql.insert_new(connection, cursor, TABLE, ("key", "value"), rows) == 0
    assert bytes(QueuedMessage.objects.get(key=present).value) == b"\x80"
    assert bytes(QueuedMessage.objects.get(key=fresh).value) == b"\x82"


def test_a_key_longer_than_the_column_holds_is_refused_before_anything_is_sent() -> None:
    from django.db import DataError

    from deadletter.models import KEY_BYTES

    longest, longer = b"q\x00" + b"\x01" * (KEY_BYTES - 2), b"q\x00" + b"\x01" * (KEY_BYTES - 1)
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor != "mysql":  # no bound on the column: a Go file's long key fits
            assert sql.insert_new(connection, cursor, TABLE, ("key", "value"), [(longer, b"")]) == 1
            return
        with pytest.raises(DataError, match=f"longer than the {KEY_BYTES} bytes"):
            sql.insert_new(
                connection, cursor, TABLE, ("key", "value"), [(longest, b""), (longer, b"")]
            )
    assert not QueuedMessage.objects.exists()  # not even the one that fits: one batch, one answer
    with connection.cursor() as cursor:
        assert sql.insert_new(connection, cursor, TABLE, ("key", "value"), [(longest, b"")]) == 1


# The defaults of MySQL 8.4 and of MariaDB 10.11: the app's statements run under both.
SQL_MODES = [
    "ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,"
    "ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION",
    "STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_AUTO_CREATE_USER,NO_ENGINE_SUBSTITUTION",
]


@pytest.mark.parametrize("mode", SQL_MODES, ids=["mysql-8.4", "mariadb-10.11"])
def test_every_statement_runs_under_the_servers_default_sql_mode(mode: str, settings) -> None:
    if connection.vendor != "mysql":
        pytest.skip("sql_mode is MySQL/MariaDB's")
    from deadletter.drain import Drainer
    from deadletter.queue import dequeue, fetch_failed_msgs
    from deadletter.queue.api import queue_names
    from deadletter.reports import overview, stats
    from deadletter.transfer import ndjson
    from tests.factories import park

    connection.ensure_connection()
    with connection.cursor() as cursor:
        if "NO_AUTO_CREATE_USER" in mode:
            cursor.execute("SELECT VERSION()")
            if "MariaDB" not in cursor.fetchone()[0]:
                pytest.skip("MariaDB's own mode")
        cursor.execute("SET SESSION sql_mode = %s", [mode])
    settings.DEADLETTER_HANDLERS = {"a": "tests.factories.failing_handler"}
    park("one", "two", queue="a")
    park("three", queue="b")
    Drainer(queues=["a"]).run()
    assert queue_names() == ["a", "b"]
    assert [o.depth.rows for o in overview.overview()] == [2, 1]
    assert overview.signatures() == ["ConnectionError: timeout after # s talking to #"]
    assert [q.depth for q in stats.collect().queues] == [2, 1]
    assert ndjson.dump(io.StringIO()) == 3
    (item,) = fetch_failed_msgs("b")
    assert dequeue(item.key)


def test_a_statement_on_a_connection_closed_under_django_fails_as_djangos_error() -> None:
    connection.ensure_connection()
    connection.connection.close()  # the driver's connection gone, Django's wrapper unaware
    try:
        with pytest.raises(DatabaseError):
            sql.read(connection, sql.statement(connection, "SELECT {key} FROM {table}"), ())
        with pytest.raises(DatabaseError):
            sql.write(connection, sql.statement(connection, "DELETE FROM {table}"), ())
    finally:
        connection.connection = None  # Django connects afresh for the next statement


# --- the path a statement takes ---------------------------------------------------------


def test_query_logging_turned_on_or_off_between_statements_is_followed_at_once(caplog) -> None:
    def logged_after(debug: bool) -> bool:
        connection.force_debug_cursor = debug
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="django.db.backends"):
            sql.read(connection, f"SELECT value FROM {TABLE}", ())
        return any("SELECT value" in r.getMessage() for r in caplog.records)

    try:
        assert [logged_after(d) for d in (False, True, True, False, True)] == [
            False,
            True,
            True,
            False,
            True,
        ]
    finally:
        connection.force_debug_cursor = False


def test_a_statement_run_inside_another_ones_execute_wrapper_leaves_both_their_rows() -> None:
    sql.write(connection, INSERT, (b"q\x00outer", b"\x81"))
    inner: list[list[tuple[object, ...]]] = []
    depth = [0]

    def nested(execute, sql_text, params, many, context):  # type: ignore[no-untyped-def]
        result = execute(sql_text, params, many, context)
        depth[0] += 1
        if depth[0] == 1:
            inner.append(sql.read(connection, f"SELECT {key} FROM {TABLE}", ()))
        return result

    key = connection.ops.quote_name("key")
    with connection.execute_wrapper(nested):
        outer = sql.read(connection, f"SELECT value FROM {TABLE}", ())
    assert [bytes(v) for (v,) in outer] == [b"\x81"]
    assert [[bytes(k) for (k,) in rows] for rows in inner] == [[b"q\x00outer"]]
    assert [bytes(v) for (v,) in sql.read(connection, f"SELECT value FROM {TABLE}", ())] == [
        b"\x81"
    ]


def test_a_statement_after_the_connection_was_closed_runs_on_the_new_one() -> None:
    sql.write(connection, INSERT, (keys.new_key("q"), b"\x80"))
    connection.close()
    assert sql.read(connection, f"SELECT value FROM {TABLE}", ()) == [(b"\x80",)]


def test_a_statement_inside_an_event_loop_is_refused_as_django_refuses_it() -> None:
    import asyncio

    from django.core.exceptions import SynchronousOnlyOperation

    sql.read(connection, f"SELECT value FROM {TABLE}", ())  # a cursor to hand on, if any

    async def inside() -> None:
        sql.read(connection, f"SELECT value FROM {TABLE}", ())

    with pytest.raises(SynchronousOnlyOperation):
        asyncio.run(inside())


def test_a_cursor_set_on_the_connection_sees_every_statement() -> None:
    """As django-debug-toolbar does: `connection.cursor` answers a cursor of its own
    while a request is watched; every statement then goes through it, and none
    once it is taken off."""
    from django.db import connections

    connection = connections["default"]  # the alias's own wrapper, as sql.connection() gives
    made: list[object] = []
    plain = connection.cursor

    def watched_cursor() -> object:
        cursor = plain()
        made.append(cursor)
        return cursor

    sql.read(connection, f"SELECT value FROM {TABLE}", ())
    connection.cursor = watched_cursor  # type: ignore[method-assign]
    try:
        sql.read(connection, f"SELECT value FROM {TABLE}", ())
        sql.write(connection, INSERT, (keys.new_key("q"), b""))
    finally:
        del connection.cursor
    assert len(made) == 2
    sql.read(connection, f"SELECT value FROM {TABLE}", ())
    assert len(made) == 2


def test_the_driver_path_is_taken_only_when_nothing_watches() -> None:
    connection.ensure_connection()
    assert sql.direct(connection)
    with connection.execute_wrapper(lambda execute, *args: execute(*args)):
        assert not sql.direct(connection)
    connection.force_debug_cursor = True
    try:
        assert not sql.direct(connection)
    finally:
        connection.force_debug_cursor = False
    connection.close()
    assert not sql.direct(connection)  # Django's cursor connects


def test_with_health_checks_a_connection_lost_since_the_last_request_is_replaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CONN_HEALTH_CHECKS: the first statement of a request finds the connection
    gone and connects afresh, on the driver path as on Django's cursor."""
    if connection.vendor == "sqlite":
        pytest.skip("SQLite's connection always counts as usable")
    from django.core.signals import request_started

    from tests.backends import backend_id, kill

    monkeypatch.setitem(connection.settings_dict, "CONN_HEALTH_CHECKS", True)
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", None)
    connection.close()
    sql.write(connection, INSERT, (keys.new_key("q"), b"\x80"))
    session = backend_id(connection)
    request_started.send(sender=None)  # Django: the next cursor checks the connection first
    kill(session)  # lost between two requests
    assert sql.read(connection, f"SELECT value FROM {TABLE}", ()) == [(b"\x80",)]
    connection.close()


def test_a_patch_of_djangos_cursor_execute_sees_every_statement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As Sentry's Django integration does: `CursorWrapper.execute` replaced on the
    class, with `functools.wraps` or without."""
    import functools

    from django.db.backends.utils import CursorWrapper

    plain = CursorWrapper.execute
    seen: list[str] = []
    connection.ensure_connection()  # MySQL's connection set-up runs statements of its own

    def bare(self, sql_text, params=None):  # type: ignore[no-untyped-def]
        seen.append(sql_text)
        return plain(self, sql_text, params)

    for patch in (bare, functools.wraps(plain)(bare)):
        monkeypatch.setattr(CursorWrapper, "execute", patch)
        seen.clear()
        sql.write(connection, INSERT, (keys.new_key("q"), b""))
        sql.read(connection, f"SELECT value FROM {TABLE}", ())
        assert [s.split()[0] for s in seen] == ["INSERT", "SELECT"]
    monkeypatch.undo()
    seen.clear()
    sql.read(connection, f"SELECT value FROM {TABLE}", ())
    assert seen == []
