"""deadletter.contrib.tasks with the Immediate backend: failed tasks parked once,
redriven by the drain, kept for an operator when this process cannot redrive
them (no longer imports, a seal that does not verify, cut arguments); the
system check."""

from __future__ import annotations

import contextlib
import hashlib
import io
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import django
import pytest
from django.apps import apps
from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.core import checks
from django.core.management import CommandError, call_command
from django.test import override_settings

from deadletter import drain, queue, signals
from deadletter.contrib.tasks import capture, framework, inflight, redrive
from deadletter.drain.outcomes import is_held
from deadletter.exceptions import NeedsOperator
from deadletter.queue import api, seals, settlements
from deadletter.wire.messages import Message
from tests.contrib.contrib_tasks_env import task_settings

if framework.find() is None and django.VERSION < (6, 0):
    pytest.skip("deadletter_tasks.E001: no Tasks framework on this leg", allow_module_level=True)

from tests.contrib import contrib_tasks_jobs as jobs  # after the skip: needs the framework

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "tasks.default"


@pytest.fixture
def captured() -> Iterator[None]:
    """The contrib app in INSTALLED_APPS (its ready() connects the receivers)."""
    with override_settings(
        **task_settings(list(settings.INSTALLED_APPS), "deadletter.contrib.tasks")
    ):
        yield


@pytest.fixture
def paths(tmp_path: Path) -> tuple[str, str]:
    return str(tmp_path / "fixed"), str(tmp_path / "record.txt")


def parked(name: str = QUEUE) -> list[Message]:
    return [item.msg for item in queue.fetch_failed_msgs(name)]


def drain_tasks() -> int:
    """`manage.py deadletter_drain --queue tasks.default`; its exit status."""
    try:
        call_command("deadletter_drain", "--queue", QUEUE, stdout=io.StringIO())
    except CommandError as exc:
        return exc.returncode
    return 0


def test_a_task_that_raises_is_parked_once_with_the_task_in_its_extra_keys(
    captured: None, paths: tuple[str, str]
) -> None:
    fixed, record = paths
    result = jobs.flaky.enqueue(fixed, record, label="first")

    assert str(result.status) == "FAILED"
    [msg] = parked()
    extra = msg.extra
    assert msg.subject == "tests.contrib.contrib_tasks_jobs.flaky"
    assert extra["Task"] == "tests.contrib.contrib_tasks_jobs.flaky"
    assert extra["TaskArgs"] == [fixed, record]
    assert extra["TaskKwargs"] == {"label": "first"}
    assert extra["TaskBackend"] == "default"
    assert extra["TaskQueue"] == "default"
    assert extra["TaskResultID"] == result.id
    assert extra["TaskException"] == "tests.contrib.contrib_tasks_jobs.CauseNotFixed"
    assert (
        extra["TaskTraceback"].splitlines()[-1]
        == f"tests.contrib.contrib_tasks_jobs.CauseNotFixed: {fixed} is missing"
    )
    assert (
        extra["LastError"] == f"tests.contrib.contrib_tasks_jobs.CauseNotFixed: {fixed} is missing"
    )
    assert "Attempts" not in extra
    assert msg.timestamp is not None and msg.queued_at is not None


def test_the_api_shows_a_parked_task_like_any_message(
    captured: None, paths: tuple[str, str], admin_client: Any
) -> None:
    jobs.flaky.enqueue(*paths)

    body = admin_client.get(f"/deadletter/api/queues/{QUEUE}/messages/").json()

    [row] = body["results"]
    [msg] = row["messages"]
    assert msg["subject"] == "tests.contrib.contrib_tasks_jobs.flaky"
    assert msg["extra"]["TaskArgs"] == list(paths)
    assert msg["extra"]["TaskException"] == "tests.contrib.contrib_tasks_jobs.CauseNotFixed"


def test_a_task_that_succeeds_parks_nothing(captured: None) -> None:
    jobs.succeeds.enqueue()

    assert api.queue_names() == []


def test_nothing_is_parked_without_opting_in(paths: tuple[str, str]) -> None:
    with override_settings(**task_settings(list(settings.INSTALLED_APPS))):
        capture.install()  # receivers connected, as after another test or app
        jobs.flaky.enqueue(*paths)

    assert parked() == []


def test_the_setting_opts_in_without_the_app_entry(paths: tuple[str, str]) -> None:
    with override_settings(
        **task_settings(list(settings.INSTALLED_APPS)), DEADLETTER_CAPTURE_TASKS=True
    ):
        apps.get_app_config("deadletter").ready()
        jobs.flaky.enqueue(*paths)

    assert len(parked()) == 1


def test_after_the_cause_is_fixed_a_drain_runs_the_task_and_the_row_is_gone(
    captured: None, paths: tuple[str, str]
) -> None:
    fixed, record = paths
    jobs.flaky.enqueue(fixed, record, label="again")
    Path(fixed).touch()

    assert drain_tasks() == 0

    assert Path(record).read_text() == "again\n"
    assert api.queue_names() == []


def test_a_task_still_failing_stays_queued_with_its_attempts_raised(
    captured: None, paths: tuple[str, str]
) -> None:
    jobs.flaky.enqueue(*paths)
    [before] = queue.fetch_failed_msgs(QUEUE)

    assert drain_tasks() != 0
    assert drain_tasks() != 0

    [after] = queue.fetch_failed_msgs(QUEUE)
    assert after.key == before.key
    assert after.msg.extra["Attempts"] == 2
    assert after.msg.extra["LastError"].startswith(
        "TaskFailed: tests.contrib.contrib_tasks_jobs.CauseNotFixed:"
    )
    assert api.queue_names() == [QUEUE]


def test_a_task_it_enqueues_in_turn_is_parked_on_its_own(
    captured: None, paths: tuple[str, str]
) -> None:
    """Only the redriven task's own failure is the handler's; a task it enqueues
    that fails is an ordinary failed task."""
    message = capture.message_of(jobs.parks_another.enqueue(*paths))  # succeeds, parks "inner"
    assert [m.extra["TaskKwargs"] for m in parked()] == [{"label": "inner"}]
    key = queue.store_failed_msgs(QUEUE, message)

    report = drain.redeliver([key])

    assert report.delivered == 1
    assert [m.extra["TaskKwargs"] for m in parked()] == [{"label": "inner"}] * 2


def rewrite_as_parked(item: queue.Queued, **changes: Any) -> None:
    """Change a parked task's extra keys as if the capture had parked it so (sealed again)."""
    extra = capture.SEAL.sealed({**item.msg.extra, **changes})
    settlements.rewrite_msg(item.key, item.msg.replace(extra=extra))


def dropped_reasons() -> list[str]:
    reasons: list[str] = []

    def receiver(sender: str, reason: str = "", **kwargs: Any) -> None:
        reasons.append(reason)

    signals.message_dropped.connect(receiver, weak=False, dispatch_uid="test-contrib-tasks")
    return reasons


@pytest.mark.parametrize(
    "path",
    [
        "tests.contrib.contrib_tasks_jobs.renamed_since",
        "tests.gone_module.flaky",
        "tests.contrib.contrib_tasks_jobs.not_a_task",
    ],
)
def test_a_task_that_does_not_import_here_is_kept_for_an_operator_never_dropped(
    captured: None, paths: tuple[str, str], path: str
) -> None:
    jobs.flaky.enqueue(*paths)
    [item] = queue.fetch_failed_msgs(QUEUE)
    rewrite_as_parked(item, Task=path)
    reasons = dropped_reasons()
    try:
        report = drain.redeliver([item.key])
    finally:
        signals.message_dropped.disconnect(dispatch_uid="test-contrib-tasks")

    assert (report.held, report.dropped["permanent"], reasons) == (1, 0, [])
    [after] = queue.fetch_failed_msgs(QUEUE)
    assert after.key == item.key
    assert is_held(after.last_error) and path in str(after.last_error)


def test_a_backend_the_settings_lack_is_kept_for_an_operator(
    captured: None, paths: tuple[str, str]
) -> None:
    jobs.flaky.enqueue(*paths)
    [item] = queue.fetch_failed_msgs(QUEUE)
    rewrite_as_parked(item, TaskBackend="gone")

    report = drain.redeliver([item.key])

    assert report.held == 1
    [after] = parked()
    assert after.extra.get("Attempts", 0) == item.attempts
    assert is_held(after.extra["LastError"]) and "gone" in after.extra["LastError"]


@contextlib.contextmanager
def framework_hidden(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Neither django.tasks nor django_tasks imports inside the block (as on a
    Django 5.2 without the backport); the modules are back before the settings."""
    with monkeypatch.context() as patch:
        for package in framework.CANDIDATES:
            for module in ("", ".base", ".signals", ".backends.immediate"):
                patch.setitem(sys.modules, package + module, None)
        yield


def test_without_a_tasks_framework_the_check_says_so(
    captured: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    with framework_hidden(monkeypatch):
        ids = [m.id for m in checks.run_checks(tags=["deadletter"])]

    assert "deadletter_tasks.E001" in ids


def test_with_a_tasks_framework_the_check_is_quiet(captured: None) -> None:
    assert "deadletter_tasks.E001" not in [m.id for m in checks.run_checks()]


def test_without_a_tasks_framework_a_parked_task_stays_parked(
    captured: None, paths: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs.flaky.enqueue(*paths)
    [item] = queue.fetch_failed_msgs(QUEUE)
    with framework_hidden(monkeypatch):
        report = drain.redeliver([item.key])

    assert report.held == 1
    assert parked()[0].extra["LastError"] == (
        "NeedsOperator: neither django.tasks nor the django-tasks backport imports"
    )


def test_the_link_queue_is_never_a_task_queue() -> None:
    assert not inflight.LINK_QUEUE.startswith(capture.QUEUE_PREFIX)


# --- only what the capture parked is redriven ------------------------------------

ATTACK = "tests.contrib.contrib_tasks_tripwire.grant"
REMOVED = object()


@pytest.fixture
def tripwire(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file the tripwire module appends to when it is imported; not imported yet."""
    imports = tmp_path / "imported"
    monkeypatch.setenv("DEADLETTER_TRIPWIRE", str(imports))
    monkeypatch.delitem(sys.modules, "tests.contrib.contrib_tasks_tripwire", raising=False)
    return imports


def test_every_key_a_parked_task_carries_is_reserved_by_the_tasks_integration(
    captured: None, paths: tuple[str, str]
) -> None:
    jobs.flaky.enqueue(*paths)

    [msg] = parked()
    own = set(msg.extra) - {"LastError"}
    assert own <= {k for k, owner in seals.reserved().items() if owner == capture.APP}
    assert "TaskSeal" in own


def test_a_task_forged_through_the_rest_api_is_refused_and_never_runs(
    captured: None, tmp_path: Path, tripwire: Path, client: Any
) -> None:
    marker = tmp_path / "granted"
    user = User.objects.create_user("service")
    user.user_permissions.add(Permission.objects.get(codename="add_queuedmessage"))
    client.force_login(user)

    response = client.post(
        f"/deadletter/api/queues/{QUEUE}/messages/",
        {"subject": "hi", "Task": ATTACK, "TaskArgs": [str(marker)]},
        content_type="application/json",
    )
    assert drain_tasks() == 0

    assert response.status_code == 400
    assert api.queue_names() == []
    assert not marker.exists()
    assert not tripwire.exists()


@pytest.mark.parametrize(
    ("seal", "why"),
    [
        ({}, "no TaskSeal key"),
        ({"TaskSeal": "0" * 64}, "TaskSeal does not match Task, TaskArgs, TaskKwargs"),
        ({"TaskSeal": 1}, "TaskSeal is a int, not a seal"),
    ],
    ids=["no seal", "a wrong seal", "not a seal"],
)
def test_a_task_message_parked_by_other_code_is_kept_unrun_and_nothing_is_imported(
    captured: None,
    tmp_path: Path,
    tripwire: Path,
    caplog: pytest.LogCaptureFixture,
    seal: dict[str, Any],
    why: str,
) -> None:
    marker = tmp_path / "granted"
    forged = {"Task": ATTACK, "TaskArgs": [str(marker)], "TaskKwargs": {}, **seal}
    key = queue.store_failed_msgs(QUEUE, Message(subject="hi", extra=forged))

    report = drain.redeliver([key])

    assert (report.held, report.dropped["permanent"]) == (1, 0)
    assert f"refused to redrive, nothing imported: {why}" in caplog.text
    assert not marker.exists()
    assert not tripwire.exists()
    assert "tests.contrib.contrib_tasks_tripwire" not in sys.modules
    assert [item.key for item in queue.fetch_failed_msgs(QUEUE)] == [key]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("Task", ATTACK, id="Task"),
        pytest.param("TaskArgs", ["/tmp/elsewhere", "/tmp/other"], id="TaskArgs"),
        pytest.param("TaskKwargs", {"label": "changed"}, id="TaskKwargs"),
        pytest.param("TaskKwargs", REMOVED, id="TaskKwargs removed"),
        pytest.param("TaskBackend", "db", id="TaskBackend"),
        pytest.param("TaskQueue", "other", id="TaskQueue"),
        pytest.param("TaskPriority", 10, id="TaskPriority"),
        pytest.param("TaskArgsCut", {"Bytes": 1, "SHA256": "0" * 64}, id="TaskArgsCut added"),
    ],
)
def test_a_parked_task_with_one_sealed_field_changed_is_refused_before_any_import(
    captured: None, paths: tuple[str, str], tripwire: Path, field: str, value: Any
) -> None:
    jobs.flaky.enqueue(*paths)
    [msg] = parked()
    extra = {**msg.extra, field: value}
    if value is REMOVED:
        del extra[field]

    with pytest.raises(NeedsOperator, match="TaskSeal does not match"):
        redrive(msg.replace(extra=extra))

    assert not tripwire.exists()


@pytest.mark.parametrize(
    ("fallbacks", "redriven"),
    [(["the-key-it-was-parked-under"], True), ([], False)],
    ids=["kept as a fallback", "retired"],
)
def test_a_task_parked_before_a_secret_key_rotation_redrives_while_the_old_key_is_a_fallback(
    captured: None, paths: tuple[str, str], fallbacks: list[str], redriven: bool
) -> None:
    fixed, record = paths
    with override_settings(SECRET_KEY="the-key-it-was-parked-under"):
        jobs.flaky.enqueue(fixed, record, label="rotated")
    [item] = queue.fetch_failed_msgs(QUEUE)
    assert "TaskSeal" in item.msg.extra
    Path(fixed).touch()

    with override_settings(SECRET_KEY="the-key-in-use-now", SECRET_KEY_FALLBACKS=fallbacks):
        report = drain.redeliver([item.key])

    assert report.delivered == int(redriven)
    assert report.dropped["permanent"] == 0
    assert Path(record).exists() is redriven


def test_a_task_sealed_under_a_key_rotated_out_is_kept_saying_why_and_redrives_once_it_is_back(
    captured: None, paths: tuple[str, str]
) -> None:
    fixed, record = paths
    with override_settings(SECRET_KEY="the-key-it-was-parked-under"):
        jobs.flaky.enqueue(fixed, record, label="rotated")
    [item] = queue.fetch_failed_msgs(QUEUE)
    Path(fixed).touch()

    with override_settings(SECRET_KEY="the-key-in-use-now", SECRET_KEY_FALLBACKS=[]):
        held = drain.redeliver([item.key])
    [kept] = queue.fetch_failed_msgs(QUEUE)
    with override_settings(
        SECRET_KEY="the-key-in-use-now", SECRET_KEY_FALLBACKS=["the-key-it-was-parked-under"]
    ):
        redriven = drain.redeliver([item.key])

    assert (held.held, kept.key, kept.attempts) == (1, item.key, item.attempts)
    assert is_held(kept.last_error) and "SECRET_KEY_FALLBACKS" in str(kept.last_error)
    assert redriven.delivered == 1 and Path(record).read_text() == "rotated\n"


BIG_LABEL = "x" * 60_000


@pytest.fixture
def parked_too_large(captured: None, paths: tuple[str, str], settings: Any) -> Message:
    """A failed flaky task whose label puts it over DEADLETTER_MAX_ROW_BYTES, as parked."""
    settings.DEADLETTER_MAX_ROW_BYTES = 50_000
    jobs.flaky.enqueue(*paths, label=BIG_LABEL)
    [msg] = parked()
    return msg


def test_a_failed_task_too_large_to_park_is_parked_sealed_without_its_arguments(
    parked_too_large: Message, paths: tuple[str, str]
) -> None:
    extra = parked_too_large.extra

    cut = seals.canonical({"TaskArgs": list(paths), "TaskKwargs": {"label": BIG_LABEL}})
    assert "TaskArgs" not in extra and "TaskKwargs" not in extra
    assert extra["TaskArgsCut"] == {"Bytes": len(cut), "SHA256": hashlib.sha256(cut).hexdigest()}
    assert extra["Task"] == "tests.contrib.contrib_tasks_jobs.flaky"
    capture.SEAL.check(extra)


def test_a_task_parked_without_its_arguments_is_kept_at_redrive_saying_what_was_cut(
    parked_too_large: Message, paths: tuple[str, str]
) -> None:
    fixed, record = paths
    Path(fixed).touch()
    cut = parked_too_large.extra["TaskArgsCut"]

    with pytest.raises(NeedsOperator) as refused:
        redrive(parked_too_large)

    said = f"arguments were cut at park time ({cut['Bytes']} bytes, sha256 {cut['SHA256']})"
    assert said in str(refused.value)
    assert not Path(record).exists()


def test_an_enormous_error_line_is_cut_so_the_failure_is_parked_with_its_arguments(
    captured: None, settings: Any
) -> None:
    settings.DEADLETTER_MAX_ROW_BYTES = 100_000
    jobs.fails_loudly.enqueue(200_000)

    [msg] = parked()
    lines = msg.extra["TaskTraceback"].splitlines()
    assert msg.extra["TaskArgs"] == [200_000]
    assert max(len(line) for line in lines) == drain.LAST_ERROR_LIMIT
    assert lines[-1].startswith("tests.contrib.contrib_tasks_jobs.CauseNotFixed: xxx")
