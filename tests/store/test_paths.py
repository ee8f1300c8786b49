"""The two statement paths of `store.sql` (the driver's cursor when nothing watches,
Django's otherwise) give the same rows, counts and errors, on every backend."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import DatabaseError, connection

from deadletter.models import KEY_BYTES
from deadletter.store import sql
from deadletter.wire import keys
from tests.backends import backend_id, kill
from tests.factories import raw_sql

pytestmark = pytest.mark.django_db(transaction=True)

INSERT = raw_sql("INSERT INTO {table} ({key}, value) VALUES (%s, %s)")
SELECT = raw_sql("SELECT {key}, value FROM {table} ORDER BY {key}")
PRESENT = keys.make_key("q", 1, 1)


def passthrough(execute: Any, sql_text: str, params: Any, many: bool, context: Any) -> Any:
    return execute(sql_text, params, many, context)


@contextlib.contextmanager
def wrapped() -> Iterator[None]:
    with connection.execute_wrapper(passthrough):
        yield


@contextlib.contextmanager
def logged() -> Iterator[None]:
    connection.force_debug_cursor = True
    try:
        yield
    finally:
        connection.force_debug_cursor = False


WATCHERS = {"execute_wrapper": wrapped, "force_debug_cursor": logged}


def outcome(run: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "result", run()
    except Exception as exc:
        return type(exc).__qualname__, str(exc)


def on_both(watch: Callable[[], contextlib.AbstractContextManager[None]], run: Callable[[], Any]):
    """`run`'s outcome on the driver path, then on Django's (with `watch` on)."""
    connection.ensure_connection()
    assert sql.direct(connection)
    driver = outcome(run)
    with watch():
        assert not sql.direct(connection)
        django = outcome(run)
    return driver, django


@pytest.fixture(params=sorted(WATCHERS))
def watch(request: pytest.FixtureRequest) -> Callable[[], contextlib.AbstractContextManager[None]]:
    sql.write(connection, INSERT, (PRESENT, b"\x81\x00"))
    sql.write(connection, INSERT, (keys.make_key("q", 2, 2), b""))
    return WATCHERS[request.param]


def test_a_read_gives_the_same_rows_of_the_same_types(watch) -> None:
    driver, django = on_both(watch, lambda: sql.read(connection, SELECT, ()))
    assert driver == django
    assert type(driver[1]) is list and [type(v) for row in driver[1] for v in row] == [bytes] * 4
    assert [v for _k, v in driver[1]] == [b"\x81\x00", b""]


def test_a_write_counts_the_same_rows(watch) -> None:
    update = raw_sql("UPDATE {table} SET value = value WHERE {key} >= %s")
    driver, django = on_both(watch, lambda: sql.write(connection, update, (b"q",)))
    assert driver == django == ("result", 2)


def test_a_present_key_skipped_counts_none_on_both(watch) -> None:
    skip = sql.statement(
        connection, "INSERT INTO {table} ({key}, value) VALUES (%s, %s){skip_duplicate}"
    )
    driver, django = on_both(watch, lambda: sql.write(connection, skip, (PRESENT, b"")))
    assert driver == django
    assert sql.read(connection, SELECT, ())[0][1] == b"\x81\x00"


def test_a_duplicate_key_is_the_same_integrity_error(watch) -> None:
    driver, django = on_both(watch, lambda: sql.write(connection, INSERT, (PRESENT, b"")))
    assert driver == django
    assert driver[0] == "IntegrityError"


def test_a_missing_table_is_the_same_error(watch) -> None:
    driver, django = on_both(watch, lambda: sql.read(connection, "SELECT 1 FROM nowhere", ()))
    assert driver == django
    assert driver[0] in {"OperationalError", "ProgrammingError"}


def test_a_value_the_database_refuses_is_the_same_error(watch) -> None:
    """A key longer than the column on MySQL/MariaDB, text read as a number on
    PostgreSQL, an integer sqlite3 cannot bind."""
    run: Callable[[], object]
    if connection.vendor == "mysql":
        run = lambda: sql.write(connection, INSERT, (b"q\x00" + b"x" * KEY_BYTES, b""))  # noqa: E731
        expected = "DataError"
    elif connection.vendor == "postgresql":
        run = lambda: sql.read(connection, "SELECT CAST(%s AS INTEGER)", ("x",))  # noqa: E731
        expected = "DataError"
    else:
        run = lambda: sql.read(connection, "SELECT %s", (1 << 70,))  # noqa: E731
        expected = "OverflowError"
    driver, django = on_both(watch, run)
    assert driver == django
    assert driver[0] == expected


def test_a_statement_too_large_for_the_server_is_refused_alike(watch, monkeypatch) -> None:
    if connection.vendor != "mysql":
        pytest.skip("max_allowed_packet is MySQL/MariaDB's")
    monkeypatch.setattr(sql, "max_packet", lambda connection: 1 << 16)
    big = (keys.new_key("q"), b"\x00" * (1 << 16))
    driver, django = on_both(watch, lambda: sql.write(connection, INSERT, big))
    assert driver == django
    assert driver[0] == "PacketTooLarge"


def test_a_connection_lost_under_django_is_the_same_error(watch) -> None:
    def lost() -> Any:
        connection.connection.close()  # the driver's connection gone, Django's wrapper unaware
        try:
            return sql.read(connection, SELECT, ())
        finally:
            connection.connection = None
            connection.ensure_connection()

    driver, django = on_both(watch, lost)
    assert driver == django
    assert driver[0] in {"InterfaceError", "OperationalError", "ProgrammingError"}


def test_a_killed_session_is_the_same_error(watch) -> None:
    if connection.vendor == "sqlite":
        pytest.skip("SQLite is a file opened in this process: there is no server session to kill")

    def lost() -> Any:
        kill(backend_id(connection))
        try:
            return sql.read(connection, SELECT, ())
        finally:
            with contextlib.suppress(DatabaseError):
                connection.close()
            connection.ensure_connection()

    driver, django = on_both(watch, lost)
    assert driver == django
    assert driver[0] in {"InterfaceError", "OperationalError"}
