"""System checks: each id has its own test, and `manage.py check` reports them."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from deadletter.checks import check_handlers, check_settings

REPO = Path(__file__).resolve().parents[1]

not_callable = 42


def ids(errors: list[Any]) -> list[str]:
    return [e.id for e in errors]


def test_the_demo_settings_pass_every_check() -> None:
    assert check_settings() + check_handlers() == []


def test_e001_max_queue_age_must_be_a_positive_timedelta(settings: Any) -> None:
    settings.DEADLETTER_MAX_QUEUE_AGE = timedelta(0)
    assert ids(check_settings()) == ["deadletter.E001"]


def test_e002_a_handler_path_that_does_not_import(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "project.demo.handlers.no_such_handler"}
    (error,) = check_handlers()
    assert error.id == "deadletter.E002"
    assert "'q'" in error.msg
    assert "project.demo.handlers.no_such_handler" in error.msg
    assert error.hint


def test_e003_a_handler_that_is_not_callable(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.test_checks.not_callable"}
    (error,) = check_handlers()
    assert error.id == "deadletter.E003"
    assert "not callable" in error.msg


@pytest.mark.parametrize(
    "handlers",
    [["project.demo.handlers.log_only"], {"": "project.demo.handlers.log_only"}, {"q": 7}],
)
def test_e004_handlers_setting_of_the_wrong_shape(settings: Any, handlers: Any) -> None:
    settings.DEADLETTER_HANDLERS = handlers
    assert ids(check_handlers()) == ["deadletter.E004"]


@pytest.mark.parametrize("attempts", [0, -1, "3", True])
def test_e005_max_attempts_must_be_none_or_a_positive_int(settings: Any, attempts: Any) -> None:
    settings.DEADLETTER_MAX_ATTEMPTS = attempts
    assert ids(check_handlers()) == ["deadletter.E005"]


def test_every_broken_handler_is_reported(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {
        "a": "nowhere.handler",
        "b": "tests.test_checks.not_callable",
        "c": "project.demo.handlers.log_only",
    }
    assert ids(check_handlers()) == ["deadletter.E002", "deadletter.E003"]


def test_manage_py_check_reports_a_handler_that_does_not_import(tmp_path: Path) -> None:
    (tmp_path / "broken_handler_settings.py").write_text(
        "from project.settings import *  # noqa: F403\n"
        "DEADLETTER_HANDLERS = {'q': 'project.demo.handlers.no_such_handler'}\n"
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--settings", "broken_handler_settings"],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{REPO}:{tmp_path}"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "deadletter.E002" in result.stderr
    assert "no_such_handler" in result.stderr


def test_e006_the_queue_database_alias_must_exist(settings: Any) -> None:
    settings.DEADLETTER_DATABASE = "nowhere"
    assert ids(check_settings()) == ["deadletter.E006"]


def test_e007_the_queue_database_must_be_sqlite_or_postgresql(monkeypatch: Any) -> None:
    from django.db import connection

    monkeypatch.setattr(connection, "vendor", "mysql")
    (error,) = check_settings()
    assert error.id == "deadletter.E007"
    assert "mysql" in error.msg
