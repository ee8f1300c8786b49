"""An operator's edit made while a real drain process's handler holds the message:
refused on every database (a server's claim holds the row locked; on SQLite the
drain's handler journal says the key is in hand), and never lost: an edit that
comes through anyway (a Python caller that does not ask the journal, a gap before
the handler starts) is left as it is by the drain's settlement (compare-and-write
on the key and the value handed over) with a note in its History, whatever the
handler did, and the edited message is what the next pass hands over."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from rest_framework.test import APIClient

from deadletter.models import ArchivedMessage
from deadletter.queue import edits, history
from deadletter.wire import codec
from deadletter.wire.messages import Message
from tests.drain.drain_harness import Drain, recorded
from tests.factories import park, table_rows

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def failing_gated_handler(msg: Message) -> None:
    """Says it holds `msg` ($DRAIN_IN_HAND), waits for $DRAIN_GATE, then fails."""
    with open(os.environ["DRAIN_IN_HAND"], "a") as marker:
        marker.write(f"{msg.subject}\n")
    while not Path(os.environ["DRAIN_GATE"]).exists():
        time.sleep(0.01)
    raise RuntimeError("downstream is down")


@pytest.fixture(autouse=True)
def editable(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {
        "q": {"handler": "tests.drain.drain_harness.recording_handler", "editable": True}
    }


def edit_while_in_hand(drain: Drain, key: bytes) -> bool:
    """Edit `key`'s subject to "fixed" once the drain's handler holds it; whether
    the edit was saved (a server refuses it: the drain holds the row)."""
    drain.wait_for(lambda: drain.in_hand.exists() and drain.in_hand.read_text())
    value = dict(table_rows())[key]
    msg = codec.decode(value)[0]
    try:
        edits.edit_msg(
            key, msg.replace(subject="fixed"), expected=edits.etag_of(key, value), actor="ops"
        )
    except edits.EditConflict:
        saved = False
    else:
        saved = True
    if connection.vendor != "sqlite":
        assert not saved
    drain.gate.touch()
    return saved


def notes(key: bytes) -> list[str]:
    return [
        a.error for a in history.attempts_of(key) if a.outcome == history.AttemptOutcome.CHANGED
    ]


def test_a_delivery_never_deletes_an_edit_saved_while_its_handler_ran(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    (key,) = park("broken")
    drain = Drain.gated(subprocess_env, tmp_path, "--format", "json")
    saved = edit_while_in_hand(drain, key)
    assert drain.wait() == 0, drain.output()
    assert recorded(drain.record) == ["broken:-"]
    rows = dict(table_rows())
    if saved:
        assert codec.decode(rows[key])[0].subject == "fixed"
        assert ArchivedMessage.objects.get(key=key).reason == "edited"
        (note,) = notes(key)
        assert "(delivered)" in note and "next pass" in note
        again = Drain(subprocess_env, tmp_path, "--format", "json")
        assert again.wait() == 0, again.output()
        assert recorded(again.record) == ["broken:-", "fixed:-"]
        assert key not in dict(table_rows())
    else:
        assert key not in rows
        assert not ArchivedMessage.objects.exists()


def test_a_failure_never_writes_the_original_back_over_an_edit(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    (key,) = park("broken")
    drain = Drain.gated(
        subprocess_env,
        tmp_path,
        "--format",
        "json",
        handler="tests.drain.test_edit_during_drain.failing_gated_handler",
    )
    saved = edit_while_in_hand(drain, key)
    assert drain.wait() == 1, drain.output()
    msg = codec.decode(dict(table_rows())[key])[0]
    if saved:
        assert (msg.subject, msg.extra) == ("fixed", {})
        (note,) = notes(key)
        assert "(failed: RuntimeError: downstream is down)" in note
        assert [a.outcome for a in history.attempts_of(key)] == ["changed"]
    else:
        assert (msg.subject, msg.extra["Attempts"]) == ("broken", 1)
        assert "downstream is down" in msg.extra["LastError"]


def test_an_edit_is_refused_while_a_drain_handler_holds_the_message(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    (key,) = park("broken")
    api = APIClient()
    api.force_login(User.objects.create_superuser("root"))
    url = f"/api/deadletter/messages/{key.hex()}/"
    etag = api.get(url)["ETag"]
    drain = Drain.gated(subprocess_env, tmp_path, "--format", "json")
    drain.wait_for(lambda: drain.in_hand.exists() and drain.in_hand.read_text())
    refused = api.patch(url, {"subject": "fixed"}, format="json", HTTP_IF_MATCH=etag)
    assert refused.status_code == 412, refused.json()
    assert "holds the message" in refused.json()["detail"]
    drain.gate.touch()
    assert drain.wait() == 0, drain.output()
    assert recorded(drain.record) == ["broken:-"]
    assert table_rows() == []
    assert not ArchivedMessage.objects.exists()
