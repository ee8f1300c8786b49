"""A redrive's counts are what happened, after any number of kills and resumes:
`manage.py deadletter_redrive` in child processes, SIGKILLed in the instant after a
message's settlement committed and before its count was written (a
`message_dequeued` receiver kills it there), and at random points; every resume
ends with each message counted once, delivered or left with its reason."""

from __future__ import annotations

import random
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission, User

from deadletter.models import Redrive
from deadletter.models.redrives import RedriveMark
from tests.drain.drain_harness import recorded
from tests.drain.redrive_harness import RedriveCommand
from tests.factories import park, parked

pytestmark = pytest.mark.slow

KILLING = "tests.drain.redrive_kills.killing_handler"


@pytest.fixture
def operator(transactional_db: None) -> User:
    user = User.objects.create_user("alice")
    user.user_permissions.add(Permission.objects.get(codename="redrive_queuedmessage"))
    return user


def _finished_exactly(total: int, command: RedriveCommand, dropped: int = 0) -> Redrive:
    """The one redrive, finished, with every message counted once: delivered, or
    dropped (`dropped` of them)."""
    redrive = Redrive.objects.get()
    counts = (redrive.status, redrive.matched, redrive.delivered, redrive.remaining)
    assert counts == ("finished", total, total - dropped, 0), (counts, redrive.reason)
    assert (redrive.failed, redrive.dropped, redrive.gone, redrive.reason) == (0, dropped, 0, "")
    assert not RedriveMark.objects.exists()
    assert parked() == []
    return redrive


def test_kills_right_after_a_settlement_lose_no_count(
    subprocess_env: dict[str, str], tmp_path: Path, operator: User
) -> None:
    """Five runs each SIGKILLed just after a delivery or a drop committed, then a
    resume to the end: delivered 25 and dropped 5 of 30, remaining 0 (main at
    a89a5f8: delivered 21, dropped 4, remaining 5)."""
    subjects = [f"m{i}" if i % 6 else f"perm-{i}" for i in range(30)]
    park(*subjects)
    args = ["--no-progress"]
    for run, kill_at in enumerate((1, 3, 5, 2, 7)):
        command = RedriveCommand(subprocess_env, tmp_path, KILLING, REDRIVE_KILL_AT=str(kill_at))
        first = ["--queue", "q", "--user", "alice"] if run == 0 else ["--resume"]
        result = command.run(*first, *args)
        assert result.returncode == -signal.SIGKILL, result.stdout + result.stderr
    command = RedriveCommand(subprocess_env, tmp_path, KILLING)
    result = command.run("--resume", *args)
    assert result.returncode == 0, result.stdout + result.stderr
    _finished_exactly(30, command, dropped=5)
    delivered = [s for s in subjects if not s.startswith("perm")]
    assert Counter(recorded(command.record)) == Counter(f"{s}:-" for s in delivered)


@pytest.mark.loops
def test_killed_at_random_points_many_times_the_counts_are_exact(
    subprocess_env: dict[str, str], tmp_path: Path, operator: User
) -> None:
    """Three redrives of 30, each SIGKILLed at random points up to four times and
    resumed: each ends delivered 30 of 30, remaining 0, whatever the kills caught."""
    rng = random.Random()
    command = RedriveCommand(subprocess_env, tmp_path, DRAIN_PAUSE="0.01")
    kills = 0
    for run in range(3):
        Redrive.objects.all().delete()
        park(*[f"r{run}-m{i}" for i in range(30)])
        args = ["--queue", "q", "--user", "alice", "--no-progress"]
        for _ in range(rng.randint(1, 4)):
            handed = len(command.in_hand_lines())
            child = command.start(*args)
            deadline = time.monotonic() + 60
            target = handed + rng.randint(1, 12)
            while len(command.in_hand_lines()) < target and child.poll() is None:
                assert time.monotonic() < deadline
                time.sleep(0.002)
            time.sleep(rng.uniform(0, 0.03))
            child.send_signal(signal.SIGKILL)
            child.communicate(timeout=60)
            kills += 1
            if Redrive.objects.exists():
                args = ["--resume", "--no-progress"]
        if not Redrive.objects.exists():
            args = ["--queue", "q", "--user", "alice", "--no-progress"]
        result = command.run(*args)
        assert result.returncode == 0, result.stdout + result.stderr
        if Redrive.objects.get().status != "finished":
            result = command.run("--resume", "--no-progress")
            assert result.returncode == 0, result.stdout + result.stderr
        _finished_exactly(30, command)
        delivered = {d for d in recorded(command.record) if d.startswith(f"r{run}-")}
        assert delivered == {f"r{run}-m{i}:-" for i in range(30)}
    print(f"\nredrive kills={kills} runs=3 counts exact")
