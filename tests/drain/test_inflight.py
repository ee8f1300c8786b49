"""The handler journal: a key is journaled while its handler runs and cleared when
it returns; a journal whose process died is counted at the next drain's start as a
killed attempt (and removed), one whose process lives is left alone."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from deadletter.drain import Drainer, DrainOptions, inflight
from deadletter.queue import history, store_failed_msgs
from deadletter.queue.claims import fetch_msg
from deadletter.wire.messages import Message
from tests.factories import parked

pytestmark = pytest.mark.django_db(transaction=True)

seen_in_journal: list[bool] = []


def looks_in_journal(msg: Message) -> None:
    """Delivers, noting whether this process's journal holds the key while it runs."""
    own = inflight.journal()
    assert own is not None
    key = fetch_key[0]
    seen_in_journal.append(key in own.path.read_bytes())


fetch_key: list[bytes] = []


@pytest.fixture
def folder() -> Iterator[Any]:
    found = inflight.folder_of(connection)
    if found is None:
        pytest.skip("an in-memory database: nothing outlives the process")
    yield found


def die_with_key_in_hand(folder: Any, key: bytes, actor: bytes = b"drain") -> int:
    """A forked child that journals `key` and is SIGKILLed holding it; its pid."""
    pid = os.fork()
    if pid == 0:  # the child: files only, never the database
        try:
            journal = inflight.Journal(folder)
            journal.enter(key, actor)
            os.kill(os.getpid(), signal.SIGKILL)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    return pid


def journals(folder: Any) -> list[str]:
    return sorted(p.name for p in folder.glob(f"*{inflight.SUFFIX}"))


def test_a_key_is_journaled_while_its_handler_runs_and_cleared_after(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.drain.test_inflight.looks_in_journal"}
    seen_in_journal.clear()
    fetch_key[:] = [store_failed_msgs("q", Message(subject="a"))]
    assert Drainer(["q"]).run().delivered == 1
    own = inflight.journal()
    assert own is not None
    assert seen_in_journal == [True]
    assert fetch_key[0] not in own.path.read_bytes()


def test_a_dead_process_key_counts_as_a_killed_attempt(settings: Any, folder: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.failing_handler"}
    key = store_failed_msgs("q", Message(subject="poison"))
    pid = die_with_key_in_hand(folder, key, b"retry:alice")
    before = set(journals(folder))
    assert any(name.startswith(f"{pid}-") for name in before)
    Drainer(["q"], DrainOptions(limit=1)).run()
    attempts = history.attempts_of(key)
    assert [a.outcome for a in attempts][:1] == ["killed"]
    assert attempts[0].actor == "retry:alice"
    assert attempts[0].duration is None
    assert attempts[0].error.startswith(f"HandlerKilled: the handler's process (pid {pid}) died")
    assert not any(name.startswith(f"{pid}-") for name in journals(folder))


def test_killed_attempts_reach_the_attempt_limit(settings: Any, folder: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.ok_handler"}
    settings.DEADLETTER_MAX_ATTEMPTS = 2
    key = store_failed_msgs("q", Message(subject="poison"))
    die_with_key_in_hand(folder, key)
    die_with_key_in_hand(folder, key)
    Drainer(["q"], DrainOptions(limit=1)).run()
    assert parked("q") == []
    assert [a.outcome for a in history.attempts_of(key)] == ["killed", "max_attempts"]


def test_a_live_process_journal_is_left_alone(settings: Any, folder: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.failing_handler"}
    key = store_failed_msgs("q", Message(subject="in hand elsewhere"))
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(ready_r)
            journal = inflight.Journal(folder)
            journal.enter(key, b"drain")
            os.write(ready_w, b"x")
            signal.pause()
        finally:
            os._exit(1)
    os.close(ready_w)
    assert os.read(ready_r, 1) == b"x"
    try:
        inflight.recover(lambda killed: pytest.fail(f"counted a live process: {killed}"), bool)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    item = fetch_msg(key)
    assert item is not None and item.attempts == 0
    assert history.attempts_of(key) == []


def test_a_key_of_a_queue_this_drain_does_not_hand_over_stays_journaled(
    settings: Any, folder: Any
) -> None:
    settings.DEADLETTER_HANDLERS = {
        "q": "tests.factories.ok_handler",
        "other": "tests.factories.ok_handler",
    }
    key = store_failed_msgs("other", Message(subject="not mine"))
    pid = die_with_key_in_hand(folder, key)
    Drainer(["q"]).run()
    assert any(name.startswith(f"{pid}-") for name in journals(folder))
    Drainer(["other"], DrainOptions(limit=1)).run()
    assert not any(name.startswith(f"{pid}-") for name in journals(folder))
    assert history.attempts_of(key) == []  # killed, then delivered: its history went with it


def test_a_torn_slot_is_skipped(folder: Any) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"999999999-1{inflight.SUFFIX}"
    path.write_bytes(b"\x01" * inflight.SLOT)
    assert inflight.recover(lambda killed: pytest.fail("a torn slot was read"), bool) == 0
    assert not path.exists()
