from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction
from django.dispatch import Signal

from deadletter import keys, sql
from deadletter.models import QueuedMessage

pytestmark = pytest.mark.django_db(transaction=True)

INSERT = f"INSERT INTO {sql.TABLE} (key, value) VALUES (%s, %s)"


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
    assert sql.read(connection, f"SELECT value FROM {sql.TABLE}", ()) == [(b"\x80",)]


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
