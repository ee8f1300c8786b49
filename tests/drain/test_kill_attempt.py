"""A handler that kills its own process (SIGKILL, as the OOM killer does) costs its
message an attempt: a real `manage.py deadletter_drain` dies mid-handler, the next
drain counts the killed attempt, and with an attempt limit of 3 the message is
dropped (archived as max_attempts) after three kills instead of killing drain after
drain for ever. Under the default settings (no attempt limit, no backoff) the
third kill sets it aside, archived as `killed` (`DEADLETTER_MAX_KILLS`), and the
messages behind it are delivered."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from deadletter.models import DropCount
from deadletter.queue import archive, fetch_failed_msgs, history, store_failed_msgs
from deadletter.queue.claims import fetch_msg
from deadletter.reports.overview import overview
from deadletter.wire.messages import Message
from tests.factories import manage_py

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

RUNS = 8
"""Drains the test allows: three kills and the drop need four, a server that has not
yet noticed a dead session (its row still locked) may need one more now and then."""


def kill_myself(msg: Message) -> None:
    """What a poison message does to its handler's process."""
    os.kill(os.getpid(), signal.SIGKILL)


def kill_myself_on_poison(msg: Message) -> None:
    """A queue with one poison message in it: the others are delivered, each noted
    in the file `DELIVERED_TO` names."""
    if msg.subject == "poison":
        os.kill(os.getpid(), signal.SIGKILL)
    with open(os.environ["DELIVERED_TO"], "a", encoding="utf-8") as delivered:
        delivered.write(f"{msg.subject}\n")


def drain(env: dict[str, str]) -> int:
    return manage_py("deadletter_drain", env=env, timeout=60).returncode


@pytest.fixture
def killing_env(subprocess_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    (tmp_path / "kill_settings.py").write_text(
        "from project.settings import *  # noqa: F403\n"
        "DEADLETTER_HANDLERS = {'q': 'tests.drain.test_kill_attempt.kill_myself'}\n"
        "DEADLETTER_MAX_ATTEMPTS = 3\n"
    )
    return {
        **subprocess_env,
        "PYTHONPATH": f"{subprocess_env['PYTHONPATH']}:{tmp_path}",
        "DJANGO_SETTINGS_MODULE": "kill_settings",
    }


def test_the_next_drain_counts_the_killed_attempt(killing_env: dict[str, str]) -> None:
    key = store_failed_msgs("q", Message(subject="poison"))
    assert drain(killing_env) == -signal.SIGKILL
    item = fetch_msg(key)
    assert item is not None and item.attempts == 0  # the dead drain wrote nothing
    assert drain(killing_env) == -signal.SIGKILL  # counted at its start, then killed again
    attempts = history.attempts_of(key)
    assert [a.outcome for a in attempts] == ["killed"]
    assert attempts[0].actor == "drain"
    assert attempts[0].error.startswith("HandlerKilled: the handler's process (pid ")
    item = fetch_msg(key)
    assert item is not None and item.attempts == 1


def test_a_poison_message_is_dropped_after_three_kills(killing_env: dict[str, str]) -> None:
    key = store_failed_msgs("q", Message(subject="poison"))
    codes: list[int] = []
    while fetch_msg(key) is not None:
        assert len(codes) < RUNS, codes
        codes.append(drain(killing_env))
    assert codes.count(-signal.SIGKILL) == 3
    assert codes[-1] == 0
    assert [a.outcome for a in history.attempts_of(key)] == ["killed", "killed", "max_attempts"]
    assert DropCount.objects.get(queue="q", reason="max_attempts").count == 1
    entry = archive.get_archived(key)
    if archive.enabled("q"):
        assert entry is not None and entry.reason == "max_attempts"
        assert entry.last_error.startswith("HandlerKilled: ")


@pytest.fixture
def default_env(subprocess_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The site's defaults: no attempt limit, no backoff, no kill limit set."""
    (tmp_path / "poison_settings.py").write_text(
        "from project.settings import *  # noqa: F403\n"
        "DEADLETTER_HANDLERS = {'q': 'tests.drain.test_kill_attempt.kill_myself_on_poison'}\n"
    )
    return {
        **subprocess_env,
        "PYTHONPATH": f"{subprocess_env['PYTHONPATH']}:{tmp_path}",
        "DJANGO_SETTINGS_MODULE": "poison_settings",
        "DELIVERED_TO": str(tmp_path / "delivered.txt"),
    }


def test_under_the_defaults_a_poison_message_is_set_aside_and_the_rest_delivered(
    default_env: dict[str, str],
) -> None:
    """The oldest message kills every drain that takes it; the third kill sets it
    aside (archived as killed, the overview flags it) and the three messages behind
    it are delivered, each once."""
    poison = store_failed_msgs("q", Message(subject="poison"))
    for i in range(3):
        store_failed_msgs("q", Message(subject=f"good {i}"))
    codes: list[int] = []
    while fetch_failed_msgs("q"):
        assert len(codes) < RUNS, codes
        codes.append(drain(default_env))
    assert codes.count(-signal.SIGKILL) == 3
    assert codes[-1] == 0
    delivered = Path(default_env["DELIVERED_TO"]).read_text(encoding="utf-8").splitlines()
    assert sorted(delivered) == ["good 0", "good 1", "good 2"]
    assert [a.outcome for a in history.attempts_of(poison)] == ["killed", "killed", "killed"]
    entry = archive.get_archived(poison)
    assert entry is not None and (entry.reason, entry.actor) == ("killed", "drain")
    assert entry.msg is not None and entry.msg.extra["Attempts"] == 3
    assert entry.last_error.startswith("HandlerKilled: ")
    (queue,) = overview(["q"])
    assert (queue.archived.rows, queue.killed.rows) == (1, 1)
