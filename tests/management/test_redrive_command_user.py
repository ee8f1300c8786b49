"""`manage.py deadletter_redrive` as documented: without `--user` it runs as the
shell's operator (the operating system's user recorded, no Django user needed);
`--user` names a Django user whose permission, queue access and redaction apply
as the API applies them, in `--dry-run` too."""

from __future__ import annotations

import getpass
from pathlib import Path

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User

from deadletter.models import QueueAccess, Redrive
from tests.drain.redrive_harness import RedriveCommand, json_lines
from tests.factories import park, parked

pytestmark = pytest.mark.slow


@pytest.fixture
def command(subprocess_env: dict[str, str], tmp_path: Path) -> RedriveCommand:
    command = RedriveCommand(subprocess_env, tmp_path)
    settings = tmp_path / f"{command.env['DJANGO_SETTINGS_MODULE']}.py"
    settings.write_text(
        settings.read_text() + "DEADLETTER_HANDLERS['other'] = 'tests.factories.ok_handler'\n"
        "DEADLETTER_REDACT = {'q': ['username']}\n"
    )
    return command


@pytest.fixture
def bob(transactional_db: None) -> User:
    """A user with the redrive permission whose queue access grants redrive on "q" only."""
    user = User.objects.create_user("bob")
    user.user_permissions.add(Permission.objects.get(codename="redrive_queuedmessage"))
    QueueAccess.objects.create(user=user, queues="q", redrive=True)
    return user


def test_without_user_it_runs_as_the_shells_operator(command: RedriveCommand) -> None:
    park("a", "b")
    result = command.run("--queue", "q", "--format", "json", "--no-progress")
    assert result.returncode == 0, result.stderr
    plan, done = json_lines(result.stdout)
    assert plan["started_by"] == getpass.getuser()
    assert (done["status"], done["delivered"]) == ("finished", 2)
    assert parked() == [] and not LogEntry.objects.exists()


def test_user_names_who_the_audit_entry_names(command: RedriveCommand, bob: User) -> None:
    park("a")
    result = command.run("--queue", "q", "--user", "bob", "--no-progress")
    assert result.returncode == 0, result.stderr
    redrive = Redrive.objects.get()
    assert redrive.started_by == "bob"
    (entry,) = LogEntry.objects.filter(object_id=str(redrive.pk))
    assert entry.user == bob


@pytest.mark.parametrize("dry_run", [False, True])
def test_user_may_not_redrive_a_queue_their_access_does_not_grant(
    command: RedriveCommand, bob: User, dry_run: bool
) -> None:
    park("x", queue="other")
    park("a")
    dry = ["--dry-run"] if dry_run else []
    refused = command.run("--queue", "other", "--user", "bob", *dry)
    assert refused.returncode == 2
    assert "'bob' may not redrive 'other'" in refused.stderr
    into = command.run("--queue", "q", "--to", "other", "--user", "bob", *dry)
    assert into.returncode == 2
    assert "'bob' may not redrive 'other'" in into.stderr
    assert not Redrive.objects.exists()
    assert parked("other") == ["x"] and parked() == ["a"]


def test_user_may_not_cancel_a_redrive_of_a_queue_they_may_not_redrive(
    command: RedriveCommand, bob: User
) -> None:
    park("x", queue="other")
    redrive = Redrive.objects.create(
        queue="other", matched=1, remaining=1, created_at="2026-12-01T00:00Z"
    )
    refused = command.run("--cancel", str(redrive.pk), "--user", "bob")
    assert refused.returncode == 2 and "may not redrive 'other'" in refused.stderr
    assert Redrive.objects.get().status == "planned"


def test_a_dry_run_as_a_user_never_matches_what_is_redacted_for_them(
    command: RedriveCommand, bob: User
) -> None:
    park("refund", username="ada@example.com")
    park("ada herself", username="someone")
    as_bob = command.run("--queue", "q", "--search", "ada", "--user", "bob", "--dry-run")
    assert as_bob.returncode == 0, as_bob.stderr
    assert "Would redrive: 1 message(s) of q" in as_bob.stdout
    as_operator = command.run("--queue", "q", "--search", "ada", "--dry-run")
    assert "Would redrive: 2 message(s) of q" in as_operator.stdout
