"""The spool keeps a park held back on SQLite: each record written to the table
once, by its own process while it lives and by any other once it is gone."""

from __future__ import annotations

import fcntl
import os
import struct
from collections.abc import Iterator
from pathlib import Path

import cbor2
import pytest
from django.db import connection

from deadletter.queue import fetch_failed_msgs, store_failed_msgs
from deadletter.store import spool
from deadletter.wire import codec, keys
from deadletter.wire.messages import Message


@pytest.fixture
def folder(transactional_db: None) -> Iterator[Path]:
    if connection.vendor != "sqlite":
        pytest.skip("the spool is SQLite's")
    found = spool.directory(connection)
    assert found is not None
    found.mkdir(exist_ok=True)
    yield found
    for left in found.glob("*"):
        left.unlink()
    found.rmdir()


def record(queue: str, key: bytes, msg: Message) -> bytes:
    body = cbor2.dumps([queue, key, codec.encode_one(msg)])
    return struct.pack(">I", len(body)) + body


def stamped(subject: str) -> Message:
    from deadletter.wire.gotime import GoTime

    return Message(subject=subject, queued_at=GoTime.now())


def test_a_dead_processs_file_is_written_and_removed(folder: Path) -> None:
    key = keys.new_key(b"q")
    (folder / "1-1-1.spool").write_bytes(record("q", key, stamped("left")))
    assert spool.recover(connection) == 1
    assert [q.key for q in fetch_failed_msgs("q")] == [key]
    assert list(folder.glob("*.spool")) == []


def test_a_torn_last_record_is_left_out_and_the_whole_ones_kept(folder: Path) -> None:
    whole = keys.new_key(b"q")
    torn = record("q", keys.new_key(b"q"), stamped("torn"))
    (folder / "1-1-1.spool").write_bytes(record("q", whole, stamped("whole")) + torn[:-3])
    assert spool.recover(connection) == 1
    assert [q.msg.subject for q in fetch_failed_msgs("q")] == ["whole"]


def test_a_record_already_in_the_table_is_not_written_twice(folder: Path) -> None:
    msg = stamped("once")
    key = store_failed_msgs("q", msg)
    (folder / "1-1-1.spool").write_bytes(record("q", key, msg))
    spool.recover(connection)
    assert [q.key for q in fetch_failed_msgs("q")] == [key]


def test_a_key_taken_by_another_message_meanwhile_gets_a_fresh_key(folder: Path) -> None:
    key = store_failed_msgs("q", stamped("already there"))
    (folder / "1-1-1.spool").write_bytes(record("q", key, stamped("spooled")))
    spool.recover(connection)
    assert sorted(q.msg.subject for q in fetch_failed_msgs("q")) == ["already there", "spooled"]


def test_a_file_its_live_owner_holds_is_left_to_it(folder: Path) -> None:
    path = folder / "1-1-1.spool"
    path.write_bytes(record("q", keys.new_key(b"q"), stamped("owned")))
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        assert spool.recover(connection) == 0
        assert fetch_failed_msgs("q") == []
    finally:
        os.close(fd)
    assert [q.msg.subject for q in fetch_failed_msgs("q")] == ["owned"]


def test_an_in_memory_database_has_no_spool(transactional_db: None) -> None:
    memory = connection.copy()
    memory.settings_dict = {**connection.settings_dict, "NAME": ":memory:"}
    if memory.vendor != "sqlite":
        pytest.skip("the spool is SQLite's")
    assert spool.directory(memory) is None
