"""`manage.py deadletter_redrive`, run where an operator runs it (a child process):
the plan first, then the run in the foreground; bad input is one error with
nothing stored; the audit entry names the user, who needs the permission; a
signal stops it cleanly, and `--resume` carries on."""

from __future__ import annotations

import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User

from deadletter.drain import plan_redrive
from deadletter.models import Redrive
from tests.drain.drain_harness import recorded
from tests.drain.redrive_harness import RedriveCommand, json_lines
from tests.factories import park, parked

pytestmark = pytest.mark.slow


@pytest.fixture
def operator(transactional_db: None) -> User:
    """A user with the redrive permission and nothing else."""
    user = User.objects.create_user("alice")
    user.user_permissions.add(Permission.objects.get(codename="redrive_queuedmessage"))
    return user


@pytest.fixture
def command(subprocess_env: dict[str, str], tmp_path: Path) -> RedriveCommand:
    return RedriveCommand(subprocess_env, tmp_path)


def test_a_redrive_is_planned_then_run_with_its_audit_entry(
    command: RedriveCommand, operator: User
) -> None:
    park("a", "b", "c")
    result = command.run("--queue", "q", "--user", "alice", "--format", "json")
    assert result.returncode == 0, result.stderr
    plan, done = json_lines(result.stdout)
    assert (plan["status"], plan["matched"], plan["started_by"]) == ("planned", 3, "alice")
    assert (done["status"], done["delivered"], done["remaining"]) == ("finished", 3, 0)
    assert sorted(recorded(command.record)) == ["a:-", "b:-", "c:-"]
    assert parked() == []
    (entry,) = LogEntry.objects.filter(object_id=str(done["id"]))
    assert entry.user == operator and "Started by deadletter_redrive" in entry.change_message


def test_the_text_output_shows_the_plan_and_the_result(
    command: RedriveCommand, operator: User
) -> None:
    park("a", "b")
    result = command.run("--queue", "q", "--user", "alice", "--rate", "50/s", "--no-progress")
    assert result.returncode == 0, result.stderr
    assert "2 message(s) of q, to its handler, at most 50/s" in result.stdout
    assert "finished: delivered 2" in result.stdout


def test_a_dry_run_shows_the_plan_and_stores_nothing(command: RedriveCommand) -> None:
    park("a", "b")
    result = command.run("--queue", "q", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "Would redrive: 2 message(s) of q" in result.stdout
    assert "nothing was stored" in result.stdout
    assert not Redrive.objects.exists() and parked() == ["a", "b"]
    assert recorded(command.record) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--queue", "q", "--to", "q"], "the destination is the queue itself"),
        (["--queue", "nowhere"], "no handler configured for queue(s) 'nowhere'"),
        (["--queue", "q", "--rate", "0"], "must be above 0"),
        (["--queue", "q", "--ramp", "1,x"], "not step sizes"),
        (["--queue", "q", "--stop-after", "150"], "at most 100"),
        (["--queue", "q", "--after", "yesterday"], "not an ISO date"),
        (["--queue", "q", "--search", 'subject:"open'], ""),
        (["--queue", "q", "--run", "1"], "give one of"),
    ],
)
def test_bad_input_exits_two_with_one_line_and_stores_nothing(
    command: RedriveCommand, operator: User, args: list[str], message: str
) -> None:
    park("a")
    result = command.run(*args, "--user", "alice")
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not Redrive.objects.exists() and parked() == ["a"]


def test_a_named_user_needs_the_permission(command: RedriveCommand, transactional_db: None) -> None:
    park("a")
    User.objects.create_user("bob")
    bob = command.run("--queue", "q", "--user", "bob")
    assert bob.returncode == 2 and "'bob' may not redrive" in bob.stderr
    ghost = command.run("--queue", "q", "--user", "ghost")
    assert ghost.returncode == 2 and "no active user 'ghost'" in ghost.stderr
    assert not Redrive.objects.exists() and parked() == ["a"]


def test_to_moves_the_messages_into_another_queue(command: RedriveCommand, operator: User) -> None:
    park("a", "b")
    park("x", queue="other")
    result = command.run("--queue", "q", "--to", "other", "--user", "alice", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json_lines(result.stdout)[-1]["moved"] == 2
    assert parked() == [] and parked("other") == ["a", "b", "x"]
    assert recorded(command.record) == []


def test_a_planned_redrive_runs_by_id_and_the_list_shows_it(
    command: RedriveCommand, operator: User, settings: Any
) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.ok_handler"}
    park("a")
    redrive = plan_redrive(queue="q", started_by="alice")
    result = command.run("--run", str(redrive.pk))
    assert result.returncode == 0, result.stderr
    assert f"Redrive {redrive.pk} finished: delivered 1" in result.stdout
    listed = command.run("--list")
    assert f"{redrive.pk}  finished" in listed.stdout and "by alice" in listed.stdout


def test_a_message_that_fails_again_exits_one(command: RedriveCommand, operator: User) -> None:
    park("bad-1", "ok", queue="picky")
    result = command.run("--queue", "picky", "--user", "alice")
    assert result.returncode == 1
    assert "failed again 1" in result.stdout


def test_cancel_is_audited_and_an_ended_one_is_refused(
    command: RedriveCommand, operator: User, settings: Any
) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.ok_handler"}
    park("a")
    redrive = plan_redrive(queue="q")
    result = command.run("--cancel", str(redrive.pk), "--user", "alice")
    assert result.returncode == 0, result.stderr
    assert Redrive.objects.get(pk=redrive.pk).status == "cancelled"
    assert LogEntry.objects.filter(object_id=str(redrive.pk), action_flag=2).exists()
    again = command.run("--cancel", str(redrive.pk), "--user", "alice")
    assert again.returncode == 2 and "has ended" in again.stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_it_after_the_message_in_hand_and_resume_carries_on(
    subprocess_env: dict[str, str], tmp_path: Path, operator: User, signum: int
) -> None:
    command = RedriveCommand(subprocess_env, tmp_path, DRAIN_PAUSE="0.3")
    park(*[f"m{i}" for i in range(6)])
    child = command.start("--queue", "q", "--user", "alice")
    deadline = time.monotonic() + 60
    while not command.in_hand_lines() and time.monotonic() < deadline:
        time.sleep(0.01)
    child.send_signal(signum)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 1, err
    redrive = Redrive.objects.get()
    assert redrive.status == "stopped" and signal.Signals(signum).name in redrive.reason
    assert f"--resume {redrive.pk}" in out + err
    assert 1 <= redrive.delivered < 6
    resumed = command.run("--resume", str(redrive.pk))
    assert resumed.returncode == 0, resumed.stderr
    assert Counter(recorded(command.record)) == Counter(f"m{i}:-" for i in range(6))
    assert parked() == []


def _kill_then_resume(
    command: RedriveCommand, args: list[str], rng: Any, total: int, progress: Callable[[], int]
) -> tuple[str, bool]:
    """Start the command, SIGKILL it at a random point of its run (once `progress()`
    has gone up by 1 to `total - 1`, and a random pause more), then resume every
    unfinished redrive; the subject in hand when the kill came ("" if none), and
    whether the kill caught a redrive unfinished."""
    wait_for = progress() + rng.randint(1, total - 1)
    child = command.start(*args)
    deadline = time.monotonic() + 60
    while progress() < wait_for and child.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.002)
    time.sleep(rng.uniform(0, 0.05))
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=60)
    lines = command.in_hand_lines()
    in_hand = lines[-1] if lines else ""
    if not Redrive.objects.exclude(status="finished").exists():
        # Killed before its plan was stored (nothing happened) or after its end.
        again = command.run(*args)
        assert again.returncode == 0, again.stdout + again.stderr
        return in_hand, False
    resumed = command.run("--resume")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    return in_hand, True


def _handed(command: RedriveCommand) -> Callable[[], int]:
    """Messages the handler has taken in hand so far (over every run)."""
    return lambda: len(command.in_hand_lines())


def _moved() -> int:
    """Messages moved so far, as the redrives' rows say."""
    return sum(Redrive.objects.values_list("moved", flat=True))


KILL_RUNS = 20
# A move hands nothing to a handler: what a kill can break is the one transaction
# a message, which fewer runs reach as surely (each run starts the command twice).
MOVE_KILL_RUNS = 8
PER_RUN = 15


@pytest.mark.loops
@pytest.mark.parametrize("destination", [None, "other"])
def test_killed_at_random_points_and_resumed_nothing_is_lost_or_moved_twice(
    subprocess_env: dict[str, str], tmp_path: Path, operator: User, destination: str | None
) -> None:
    """20 runs (8 for a move), each SIGKILLed at a random point of its redrive and resumed: every
    message delivered (or moved) at least once, a second delivery only for the
    message a kill caught in hand, no move twice, nothing left in the source."""
    rng = random.Random()
    command = RedriveCommand(subprocess_env, tmp_path, DRAIN_PAUSE="0.02")
    park("x", queue="other")
    doubles = caught = 0
    runs = MOVE_KILL_RUNS if destination else KILL_RUNS
    for run in range(runs):
        subjects = [f"r{run}-m{i}" for i in range(PER_RUN)]
        park(*subjects)
        args = ["--queue", "q", "--user", "alice", "--no-progress"]
        progress = _handed(command)
        if destination:
            args += ["--to", destination, "--rate", "50/s"]
            progress = _moved
        in_hand, unfinished = _kill_then_resume(command, args, rng, PER_RUN, progress)
        caught += unfinished
        assert parked() == [], f"run {run}: left in the source"
        if destination:
            assert parked("other").count(subjects[0]) == 1
            assert sorted(s for s in parked("other") if s.startswith(f"r{run}-")) == sorted(
                subjects
            ), f"run {run}: not moved exactly once"
            continue
        deliveries = Counter(d for d in recorded(command.record) if d.startswith(f"r{run}-"))
        assert set(deliveries) == {f"{s}:-" for s in subjects}, f"run {run}: lost"
        twice = {d for d, n in deliveries.items() if n > 1}
        assert twice <= {f"{in_hand}:-"}, (run, twice, in_hand)
        doubles += len(twice)
    redrives = Redrive.objects.all()
    assert all(r.status == "finished" for r in redrives), [(r.pk, r.status) for r in redrives]
    print(
        f"\nkill runs={runs} caught_unfinished={caught} destination={destination} "
        f"lost=0 doubles={doubles}"
    )


def test_a_cancel_from_another_process_stops_a_running_redrive(
    subprocess_env: dict[str, str], tmp_path: Path, operator: User
) -> None:
    gate = tmp_path / "gate"
    command = RedriveCommand(subprocess_env, tmp_path, DRAIN_GATE=str(gate))
    park(*[f"m{i}" for i in range(8)])
    child = command.start("--queue", "q", "--user", "alice", "--no-progress")
    deadline = time.monotonic() + 60
    while not command.in_hand_lines() and time.monotonic() < deadline:
        time.sleep(0.01)
    redrive = Redrive.objects.get()
    cancelled = command.run("--cancel", str(redrive.pk), "--user", "alice")
    assert cancelled.returncode == 0, cancelled.stderr
    time.sleep(1.5)  # the runner looks at its row once a second
    gate.touch()  # the message in hand is delivered, and no other
    out, err = child.communicate(timeout=60)
    assert child.returncode == 1, err
    assert f"Redrive {redrive.pk} cancelled" in out
    redrive.refresh_from_db()
    assert (redrive.status, redrive.delivered, redrive.remaining) == ("cancelled", 1, 7)
    assert recorded(command.record) == ["m0:-"] and len(parked()) == 7
