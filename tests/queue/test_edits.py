"""Editing a parked message (`queue.edits`): the edited message replaces the row
under its key, the original goes to the archive as `edited`, and whatever would
make that unsafe (a stale ETag, a kept or sealed key, a value Go cannot hold, a
queue not editable) is refused with nothing written."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections

from deadletter.contrib.celery import capture as celery_capture
from deadletter.contrib.tasks import capture as tasks_capture
from deadletter.models import ArchivedMessage
from deadletter.queue import archive, claim_transactions, claims, dequeue, edits, redaction, seals
from deadletter.queue.refusals import Refused
from deadletter.wire import codec
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message
from tests.factories import insert_at, park, table_rows

pytestmark = pytest.mark.django_db

SEALED = [tasks_capture.TASK_ARGS, celery_capture.TASK_ARGS]


@pytest.fixture(autouse=True)
def editable(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {
        "q": {"handler": "tests.factories.ok_handler", "editable": True},
        "fixed": "tests.factories.ok_handler",
    }


def row_value(key: bytes) -> bytes:
    return dict(table_rows())[key]


def test_an_edit_keeps_the_key_and_archives_the_original_as_edited() -> None:
    (key,) = park("Ocjena: Matematika", username="ana", extra={"Site": "x"})
    before = row_value(key)
    msg = codec.decode(before)[0]
    edited = edits.edit_msg(
        key,
        msg.replace(subject="Ocjena: Fizika", extra={"Site": "y"}),
        expected=edits.etag_of(key, before),
        actor="ops",
    )
    assert edited.key == key
    assert [(c.name, c.old, c.new) for c in edited.changes] == [
        ("subject", "Ocjena: Matematika", "Ocjena: Fizika"),
        ("extra.Site", "x", "y"),
    ]
    [(stored_key, after)] = table_rows()
    assert stored_key == key
    assert codec.decode(after)[0].subject == "Ocjena: Fizika"
    assert codec.decode(after)[0].queued_at == msg.queued_at
    assert edited.etag == edits.etag_of(key, after) != edits.etag_of(key, before)
    entry = archive.get_archived(key)
    assert entry is not None
    assert (entry.reason, entry.actor, entry.value) == ("edited", "ops", before)


def test_a_stale_etag_is_refused_and_nothing_is_written() -> None:
    (key,) = park("first")
    before = row_value(key)
    msg = codec.decode(before)[0]
    edits.edit_msg(
        key, msg.replace(subject="second"), expected=edits.etag_of(key, before), actor="a"
    )
    after = row_value(key)
    with pytest.raises(edits.EditConflict, match="changed since the form was opened"):
        edits.edit_msg(
            key, msg.replace(subject="third"), expected=edits.etag_of(key, before), actor="b"
        )
    assert row_value(key) == after
    assert ArchivedMessage.objects.count() == 1


def test_an_edit_of_a_row_that_is_gone_is_a_conflict() -> None:
    (key,) = park("gone")
    before = row_value(key)
    dequeue(key)
    with pytest.raises(edits.EditConflict, match="gone"):
        edits.edit_msg(key, Message(subject="x"), expected=edits.etag_of(key, before), actor="a")
    assert table_rows() == []
    assert ArchivedMessage.objects.count() == 0


@pytest.mark.parametrize("name", [*SEALED, "Attempts", "LastError"])
def test_a_kept_or_sealed_key_is_refused(name: str) -> None:
    assert name in edits.fixed_keys()
    assert name in seals.reserved() or name in edits.DRAIN_KEYS
    (key,) = park("sealed", extra={name: 1})
    before = row_value(key)
    msg = codec.decode(before)[0]
    with pytest.raises(edits.EditRefused, match="not editable") as refused:
        edits.edit_msg(
            key, msg.replace(extra={name: 2}), expected=edits.etag_of(key, before), actor="a"
        )
    assert refused.value.field == f"extra.{name}"
    with pytest.raises(edits.EditRefused, match="not editable"):
        edits.edit_msg(key, msg.replace(extra={}), expected=edits.etag_of(key, before), actor="a")
    assert row_value(key) == before
    assert ArchivedMessage.objects.count() == 0


def test_the_first_failure_stays_as_it_was() -> None:
    (key,) = park("aged")
    before = row_value(key)
    msg = codec.decode(before)[0]
    with pytest.raises(edits.EditRefused, match="age limit"):
        edits.edit_msg(
            key,
            msg.replace(queued_at=GoTime.now() + timedelta(days=1)),
            expected=edits.etag_of(key, before),
            actor="a",
        )
    assert row_value(key) == before


@pytest.mark.parametrize(
    "change",
    [{"code": 2**63}, {"extra": {"Subject": "a second subject Go would read as the field"}}],
)
def test_a_value_go_cannot_hold_is_refused_before_anything_is_written(change: dict) -> None:
    (key,) = park("encodable")
    before = row_value(key)
    msg = codec.decode(before)[0]
    with pytest.raises(edits.EditRefused, match="Go format cannot hold"):
        edits.edit_msg(key, msg.replace(**change), expected=edits.etag_of(key, before), actor="a")
    assert row_value(key) == before
    assert ArchivedMessage.objects.count() == 0


def test_a_queue_whose_policy_does_not_say_editable_is_refused() -> None:
    (key,) = park("fixed", queue="fixed")
    before = row_value(key)
    msg = codec.decode(before)[0]
    with pytest.raises(edits.EditRefused, match="not editable"):
        edits.edit_msg(
            key, msg.replace(subject="x"), expected=edits.etag_of(key, before), actor="a"
        )
    assert row_value(key) == before


def test_a_row_of_several_messages_is_refused() -> None:
    key = insert_at("q", GoTime.now().unix_ns, 1, [Message(subject="a"), Message(subject="b")])
    before = row_value(key)
    with pytest.raises(edits.EditRefused, match="holds 2 messages"):
        edits.edit_msg(key, Message(subject="c"), expected=edits.etag_of(key, before), actor="a")
    assert row_value(key) == before


def test_an_edit_that_changes_nothing_writes_nothing() -> None:
    (key,) = park("same")
    before = row_value(key)
    msg = codec.decode(before)[0]
    edited = edits.edit_msg(key, msg, expected=edits.etag_of(key, before), actor="a")
    assert edited.changes == ()
    assert row_value(key) == before
    assert ArchivedMessage.objects.count() == 0


def test_with_the_archive_off_the_edit_is_saved_and_nothing_archived(settings: Any) -> None:
    settings.DEADLETTER_ARCHIVE_FOR = timedelta(0)
    (key,) = park("off")
    before = row_value(key)
    msg = codec.decode(before)[0]
    edits.edit_msg(key, msg.replace(subject="on"), expected=edits.etag_of(key, before), actor="a")
    assert codec.decode(row_value(key))[0].subject == "on"
    assert ArchivedMessage.objects.count() == 0


def test_the_audit_text_cuts_long_values() -> None:
    assert edits.shown("x" * 500) == '"' + "x" * 198 + "…"
    assert edits.shown([1, "a"]) == '[1, "a"]'
    assert edits.shown(None) == "null"


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_edits_with_one_etag_one_wins_one_is_refused() -> None:
    """Two threads, two connections, one ETag: whichever reads the row second sees
    it changed (or, on a server, held) and is refused; the row holds the winner's
    message and the archive the original exactly once."""
    (key,) = park("original")
    before = row_value(key)
    msg = codec.decode(before)[0]
    etag = edits.etag_of(key, before)
    start = threading.Barrier(2)
    outcomes: dict[str, Any] = {}

    def edit(subject: str) -> None:
        start.wait()
        try:
            outcomes[subject] = edits.edit_msg(
                key, msg.replace(subject=subject), expected=etag, actor=subject
            )
        except edits.EditConflict as exc:
            outcomes[subject] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=edit, args=(s,)) for s in ("left", "right")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    won = [s for s, o in outcomes.items() if isinstance(o, edits.Edited)]
    lost = [s for s, o in outcomes.items() if isinstance(o, edits.EditConflict)]
    assert len(won) == 1 and len(lost) == 1, outcomes
    assert codec.decode(row_value(key))[0].subject == won[0]
    entries = list(ArchivedMessage.objects.filter(key=key))
    assert [(bytes(e.value), e.actor) for e in entries] == [(before, won[0])]


@pytest.mark.django_db(transaction=True)
def test_on_a_server_a_row_a_drain_holds_is_a_conflict_not_a_wait() -> None:
    """A drain holds its row locked while the handler runs: an edit then would be
    overwritten by the attempt's record, so it is refused at once."""
    if not claims.can_claim_rows():
        pytest.skip("SQLite: one writer at a time, the edit waits for the write lock")
    (key,) = park("held")
    before = row_value(key)
    msg = codec.decode(before)[0]
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with claim_transactions.atomic():
                assert claims.fetch_msg(key) is not None  # locked FOR UPDATE SKIP LOCKED
                locked.set()
                release.wait(30)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(30)
        with pytest.raises(edits.EditConflict, match="holds the message"):
            edits.edit_msg(
                key, msg.replace(subject="x"), expected=edits.etag_of(key, before), actor="a"
            )
    finally:
        release.set()
        holder.join(30)
    assert row_value(key) == before
    assert not ArchivedMessage.objects.exists()


def test_restoring_an_edits_original_takes_its_key_back_and_archives_the_edited_copy() -> None:
    (key,) = park("Ocjena: Matematika", username="ana")
    before = row_value(key)
    msg = codec.decode(before)[0]
    fixed = msg.replace(subject="typo fixed")
    edits.edit_msg(key, fixed, expected=edits.etag_of(key, before), actor="a")
    edited_value = row_value(key)
    original = archive.get_archived(key)
    assert original is not None and original.value == before

    restored = archive.restore(original.id, actor="b")

    assert restored == archive.Restored(key, moved=False, replaced=True)
    assert table_rows() == [(key, before)]  # one copy in the queue, never both
    [entry] = archive.archived_msgs("q")
    assert (entry.key, entry.reason, entry.actor, entry.value) == (key, "edited", "b", edited_value)


def test_a_queue_not_editable_is_one_refusal_every_edge_asks() -> None:
    assert edits.queue_refusal("q") is None
    refusal = edits.queue_refusal("fixed")
    assert isinstance(refusal, Refused) and "not editable" in refusal.message


def test_the_fields_a_redacted_view_masks_are_named_as_changes_are(settings: Any) -> None:
    settings.DEADLETTER_REDACT = {"q": ["username", "Card"]}
    msg = Message(subject="s", username="ana", extra={"Card": "4111", "Site": "x"})
    shown = redaction.redacted(msg, "q", reveal=False)
    assert set(edits.masked_fields(msg, shown)) == {"username", "extra.Card"}
    assert edits.masked_fields(msg, redaction.redacted(msg, "q", reveal=True)) == ()
