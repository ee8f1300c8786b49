"""The archive: what leaves a queue other than by delivery lands in it with its
reason and actor, bytes and key unchanged, and a restore puts it back in its place."""

from __future__ import annotations

import itertools
import logging
from datetime import timedelta
from typing import Any

import pytest

from deadletter.models import ArchivedMessage, Attempt
from deadletter.queue import Removal, archive
from deadletter.queue.archive import ArchiveError
from deadletter.wire import codec
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message
from tests.factories import DAY, insert, insert_at, park, park_aged, parked, table_rows

pytestmark = pytest.mark.django_db


def test_discard_archives_the_row_as_deleted_by_its_actor() -> None:
    (key,) = park("one", extra={"LastError": "ConnectionError: timeout after 30 s"})
    value = dict(table_rows())[key]
    assert archive.discard(key, "alice") is Removal.REMOVED
    assert table_rows() == []
    entry = archive.get_archived(key)
    assert entry is not None
    assert (entry.key, entry.queue, entry.reason, entry.actor) == (key, "q", "deleted", "alice")
    assert entry.value == value
    assert entry.msg is not None and entry.msg.subject == "one"
    assert entry.last_error == "ConnectionError: timeout after 30 s"
    assert ArchivedMessage.objects.get().signature == "ConnectionError: timeout after # s"
    assert archive.get_entry(entry.id) == entry


def test_discard_of_a_missing_row_archives_nothing() -> None:
    assert archive.discard(b"q\x00" + bytes(16), "alice") is Removal.ABSENT
    assert not ArchivedMessage.objects.exists()


def test_discard_of_a_message_whose_seal_broke_archives_it_as_unsealed() -> None:
    from deadletter.drain.outcomes import held_error
    from deadletter.exceptions import NeedsOperator
    from deadletter.queue.seals import Seal

    seal = Seal("tests", "TestSeal", ("Task",))
    with pytest.raises(NeedsOperator) as raised:
        seal.require({"Task": "x", "TestSeal": "forged"}, "nothing run")
    error = held_error(raised.value)
    assert error.startswith(archive.UNSEALED_MARK)
    (key,) = park("sealed", extra={"LastError": error})
    assert archive.discard(key, "bob") is Removal.REMOVED
    entry = archive.get_archived(key)
    assert entry is not None and (entry.reason, entry.actor) == ("unsealed", "bob")


def test_discard_many_archives_a_chunk_in_one_go() -> None:
    keys = park("a", "b", "c")
    assert archive.discard_many([keys[0], keys[2], keys[0]], "carol") == 2
    assert parked() == ["b"]
    assert [(e.key, e.reason, e.actor) for e in archive.archived_msgs("q")] == [
        (keys[0], "deleted", "carol"),
        (keys[2], "deleted", "carol"),
    ]


def test_archived_msgs_is_oldest_first_by_queue_and_in_pages(monkeypatch) -> None:
    monkeypatch.setattr(archive, "PAGE", 2)
    keys = park("a", "b", "c", "d", "e")
    other = park("x", queue="other")
    for key in [*keys[:3], *other, *keys[3:]]:
        archive.discard(key, "dave")
    assert [e.msg.subject for e in archive.archived_msgs("q") if e.msg] == list("abcde")
    assert [e.key for e in archive.archived_msgs()] == [*keys[:3], *other, *keys[3:]]


def test_a_corrupt_row_is_archived_with_its_bytes_and_no_message() -> None:
    key = b"q\x00" + bytes(15) + b"\x01"
    insert(key, b"corrupted cbor data")
    assert archive.discard(key, "erin") is Removal.REMOVED
    entry = archive.get_archived(key)
    assert entry is not None
    assert (entry.msg, entry.value, entry.last_error) == (None, b"corrupted cbor data", "")


def test_restore_puts_the_message_back_under_its_key_in_its_place() -> None:
    now = GoTime.now().unix_ns
    first, middle, last = (
        insert_at("q", now + i, 1, Message(subject=s, queued_at=GoTime(now)))
        for i, s in enumerate(["first", "middle", "last"])
    )
    value = dict(table_rows())[middle]
    archive.discard(middle, "frank")
    assert parked() == ["first", "last"]
    assert archive.restore_msg(middle) == middle
    assert parked() == ["first", "middle", "last"]
    assert dict(table_rows())[middle] == value
    assert archive.get_archived(middle) is None
    assert not ArchivedMessage.objects.exists()
    assert {first, last} < {k for k, _ in table_rows()}


def test_restore_keeps_attempts_and_last_error_in_the_bytes() -> None:
    (key,) = park("tried", extra={"Attempts": 3, "LastError": "ValueError: bad"})
    archive.discard(key, "gina")
    archive.restore_msg(key)
    (item,) = archive_free_fetch()
    assert (item.attempts, item.last_error) == (3, "ValueError: bad")


def archive_free_fetch() -> list:
    from deadletter.queue import fetch_failed_msgs

    return fetch_failed_msgs("q")


def test_restore_when_the_key_is_taken_goes_to_the_tail_under_a_fresh_key(caplog) -> None:
    (key,) = park("original")
    Attempt.objects.create(key=key, at=GoTime.now(), outcome="failed", error="E: one")
    archive.discard(key, "hal")
    insert(key, codec.encode_one(Message(subject="edited", queued_at=GoTime.now())))
    park("later")
    entry = archive.get_archived(key)
    assert entry is not None
    with caplog.at_level(logging.WARNING, logger="deadletter"):
        restored = archive.restore(entry.id, actor="hal")
    assert restored.moved and restored.key != key and restored.key > key
    assert parked() == ["edited", "later", "original"]
    assert list(Attempt.objects.filter(key=restored.key).values_list("error", flat=True)) == [
        "E: one"
    ]
    assert Attempt.objects.filter(key=key).count() == 1  # the live row keeps its own
    restored_value = dict(table_rows())[restored.key]
    assert codec.decode(restored_value)[0].extra["Origin"] == key.hex()  # ctx.key stays
    with pytest.raises(ArchiveError):
        archive.restore(entry.id, actor="hal")


def test_restore_msg_warns_when_the_key_was_taken(caplog) -> None:
    (key,) = park("original")
    archive.discard(key, "ivy")
    insert(key, codec.encode_one(Message(subject="edited", queued_at=GoTime.now())))
    with caplog.at_level(logging.WARNING, logger="deadletter"):
        live = archive.restore_msg(key)
    assert live != key
    assert "its own was taken" in caplog.text


def test_restore_msg_of_a_key_never_archived_is_an_archive_error() -> None:
    with pytest.raises(ArchiveError, match="no archived message"):
        archive.restore_msg(b"q\x00" + bytes(16))


def test_the_newest_entry_of_a_key_is_the_one_restored() -> None:
    (key,) = park("v1")
    archive.discard(key, "jo")
    archive.restore_msg(key)
    archive.discard(key, "kim")
    entries = list(archive.archived_msgs())
    assert [e.actor for e in entries] == ["kim"]
    assert archive.get_archived(key) == entries[0]


# --- the drop paths ------------------------------------------------------------


def permanent_handler(msg: Message) -> None:
    from deadletter import PermanentFailure

    raise PermanentFailure("blocked recipient 42")


def reasons() -> list[tuple[str, str]]:
    return [(e.reason, e.actor) for e in archive.archived_msgs()]


def test_a_scan_archives_an_expired_message_as_expired_by_drain() -> None:
    key = park_aged("q", 31)
    value = dict(table_rows())[key]
    assert parked() == []
    (entry,) = archive.archived_msgs()
    assert (entry.key, entry.reason, entry.actor, entry.value) == (key, "expired", "drain", value)


def test_a_scan_archives_a_corrupt_row_with_its_raw_bytes() -> None:
    key = b"q\x00" + bytes(15) + b"\x07"
    insert(key, b"corrupted cbor data")
    assert parked() == []
    (entry,) = archive.archived_msgs()
    assert (entry.key, entry.reason, entry.msg, entry.value) == (
        key,
        "corrupt",
        None,
        b"corrupted cbor data",
    )


def test_the_expired_messages_of_a_multi_message_row_are_archived_each_alone() -> None:
    now = GoTime.now().unix_ns
    old = Message(subject="old", queued_at=GoTime(now - 31 * DAY))
    live = Message(subject="live", queued_at=GoTime(now))
    key = insert_at("q", now - 31 * DAY, 1, [old, live])
    assert parked() == ["live"]
    (entry,) = archive.archived_msgs()
    assert (entry.key, entry.reason, entry.value) == (key, "expired", codec.encode_one(old))


def test_the_expired_messages_of_a_legacy_row_are_archived_in_their_slots() -> None:
    now = GoTime.now().unix_ns
    old = Message(subject="old", queued_at=GoTime(now - 31 * DAY))
    live = Message(subject="live", queued_at=GoTime(now))
    insert(b"q", codec.encode([old, live]))
    assert parked() == ["live"]
    (entry,) = archive.archived_msgs()
    assert entry.reason == "expired" and entry.value == codec.encode_one(old)
    assert archive.restore_msg(entry.key) == entry.key
    (live_key,) = [k for k, _ in table_rows() if k != entry.key]
    assert entry.key < live_key  # its place in the order, before the message after it


def test_a_queues_own_max_age_decides_what_expires(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {
        "short": {"handler": "tests.factories.ok_handler", "max_age": timedelta(days=2)}
    }
    park_aged("short", 3)
    park_aged("q", 3)
    assert parked("short") == [] and parked("q") == ["m1"]
    assert [(e.queue, e.reason) for e in archive.archived_msgs()] == [("short", "expired")]


def drain(queue: str) -> Any:
    from deadletter.drain import Drainer, DrainOptions

    return Drainer([queue], DrainOptions()).run()


def test_a_permanent_failure_in_a_drain_is_archived_as_permanent_by_drain(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.queue.test_archive.permanent_handler"}
    (key,) = park("blocked")
    assert drain("q").dropped["permanent"] == 1
    assert table_rows() == []
    (entry,) = archive.archived_msgs()
    assert (entry.key, entry.reason, entry.actor) == (key, "permanent", "drain")
    assert entry.last_error == "PermanentFailure: blocked recipient 42"
    assert ArchivedMessage.objects.get().signature == "PermanentFailure: blocked recipient #"


def test_the_attempt_limit_in_a_drain_archives_as_max_attempts_with_the_last_error(
    settings: Any,
) -> None:
    settings.DEADLETTER_HANDLERS = {
        "q": {"handler": "tests.factories.failing_handler", "max_attempts": 1}
    }
    (key,) = park("unreachable")
    drain("q")
    assert table_rows() == []
    (entry,) = archive.archived_msgs()
    assert (entry.key, entry.reason, entry.actor) == (key, "max_attempts", "drain")
    assert entry.last_error == "ConnectionError: timeout after 30 s talking to 10.0.0.7:8443"
    assert entry.msg is not None and entry.msg.extra["Attempts"] == 1


def _edit(key: bytes) -> None:
    from deadletter.queue import edits

    value = dict(table_rows()).get(key)
    if value is not None:
        msg = codec.decode(value)[0]
        edits.edit_msg(
            key, msg.replace(subject="edited"), expected=edits.etag_of(key, value), actor="ed"
        )


def _restore_newest(wanted: Any) -> None:
    found = [e for e in archive.archived_msgs("q") if wanted(e)]
    if found:
        archive.restore(found[-1].id, actor="ed")


STEPS = {
    "edit": _edit,
    "delete": lambda key: archive.discard(key, "ed"),
    "restore the original": lambda key: _restore_newest(
        lambda e: e.msg is not None and e.msg.subject == "original"
    ),
    "restore the deleted copy": lambda key: _restore_newest(lambda e: e.reason == "deleted"),
}


@pytest.mark.parametrize("order", list(itertools.permutations(STEPS)), ids=" -> ".join)
def test_at_most_one_copy_of_an_edited_message_is_ever_live(
    order: tuple[str, ...], settings: Any
) -> None:
    """Whatever the order of an edit, a delete and the restores of the original and
    of the deleted copy (each step done when there is something to do it on), the
    queue never holds two copies, and a copy is always live or in the archive."""
    settings.DEADLETTER_HANDLERS = {
        "q": {"handler": "tests.factories.ok_handler", "editable": True}
    }
    (key,) = park("original")
    for step in order:
        STEPS[step](key)
        live = table_rows()
        assert len(live) <= 1, (step, [codec.decode(v)[0].subject for _, v in live])
        assert all(k == key for k, _ in live)
        assert live or ArchivedMessage.objects.filter(key=key).exists()
