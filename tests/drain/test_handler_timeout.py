"""Handlers under a time limit (`deadletter.drain.timeouts`): DEADLETTER_HANDLER_TIMEOUT,
a drain's budget, the bound on hung handler threads, and checks E010 and E011."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, connections

from deadletter import drain
from deadletter.checks import check_time_limits
from deadletter.drain import DrainConfigError, Drainer, DrainOptions, Outcome, redeliver, timeouts
from deadletter.models import QueuedMessage
from deadletter.queue import fetch_failed_msgs
from deadletter.wire.messages import Message
from tests.drain.drain_harness import other_sessions_holding_locks
from tests.factories import REPO, park, parked, parked_messages

pytestmark = pytest.mark.django_db(transaction=True)

# What is left of a budget when the handler starts is a little under the budget.
TIMED_OUT = re.compile(r"HandlerTimeout: handler did not return within [0-9.]+ s")

release = threading.Event()
seen: list[dict[str, Any]] = []


def handler(msg: Message) -> None:
    """Hangs (up to 60 s, until the test ends) on a subject starting "hang"; records
    the thread it ran in and the connection it used."""
    QueuedMessage.objects.exists()
    seen.append({"thread": threading.current_thread(), "connection": connections["default"]})
    if msg.subject.startswith("hang"):
        release.wait(60)


@pytest.fixture(autouse=True)
def handlers(settings: Any) -> Iterator[None]:
    settings.DEADLETTER_HANDLERS = {"q": "tests.drain.test_handler_timeout.handler"}
    release.clear()
    seen.clear()
    yield
    release.set()
    wait_for(lambda: drain.hung_handlers() == 0)


def wait_for(condition: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


# --- DEADLETTER_HANDLER_TIMEOUT -------------------------------------------------------


def test_without_a_timeout_the_handler_runs_inline_in_the_drains_thread() -> None:
    park("one")
    assert Drainer().run().delivered == 1
    assert seen[0]["thread"] is threading.current_thread()


def test_a_handler_past_the_timeout_is_a_failed_attempt_and_the_drain_goes_on(
    settings: Any,
) -> None:
    settings.DEADLETTER_HANDLER_TIMEOUT = 0.5
    park("hangs", "fine")
    report = Drainer().run()
    assert (report.failed, report.delivered) == (1, 1)
    (msg,) = parked_messages()
    assert msg.subject == "hangs"
    assert msg.extra["Attempts"] == 1
    assert msg.extra["LastError"] == "HandlerTimeout: handler did not return within 0.5 s"
    assert not release.is_set()


def test_a_message_that_always_hangs_reaches_max_attempts(settings: Any) -> None:
    settings.DEADLETTER_HANDLER_TIMEOUT = 0.2
    settings.DEADLETTER_MAX_ATTEMPTS = 2
    park("hangs")
    assert Drainer().run().failed == 1
    assert Drainer().run().dropped["max_attempts"] == 1
    assert parked_messages() == []


def test_a_handler_under_a_timeout_closes_its_threads_connections_when_it_ends(
    settings: Any,
) -> None:
    settings.DEADLETTER_HANDLER_TIMEOUT = 30
    park("one")
    assert Drainer().run().delivered == 1
    (call,) = seen
    assert call["thread"] is not threading.current_thread()
    assert call["connection"] is not connections["default"]
    assert call["connection"].connection is None


def test_the_claim_transaction_is_closed_once_the_timeout_passed(settings: Any) -> None:
    if connection.vendor == "sqlite":
        pytest.skip("a server claims rows in a transaction; SQLite holds none while handling")
    settings.DEADLETTER_HANDLER_TIMEOUT = 0.5
    park("hangs")
    assert Drainer().run().failed == 1
    assert not release.is_set()  # the handler still runs
    assert not connection.in_atomic_block
    assert other_sessions_holding_locks() == []


@pytest.mark.parametrize("value", [0, -1, "30", True, float("nan")])
def test_a_bad_handler_timeout_refuses_to_start_before_touching_any_row(
    settings: Any, value: Any
) -> None:
    settings.DEADLETTER_HANDLER_TIMEOUT = value
    park("one")
    with pytest.raises(DrainConfigError, match="DEADLETTER_HANDLER_TIMEOUT"):
        Drainer()
    assert seen == []


# --- a run's budget --------------------------------------------------------------------


def test_a_drain_with_no_budget_left_hands_nothing_over() -> None:
    park("one")
    report = Drainer(options=DrainOptions(budget=0)).run()
    assert (report.handled, report.stopped_by) == (0, "time budget")
    assert parked() == ["one"]


def test_a_budget_gives_the_handler_what_is_left_of_it() -> None:
    park("hangs", "next")
    started = time.monotonic()
    report = Drainer(options=DrainOptions(budget=0.5)).run()
    assert time.monotonic() - started < 30  # the handler would hang 60 s
    assert (report.failed, report.stopped_by) == (1, "time budget")
    assert parked() == ["hangs", "next"]
    assert TIMED_OUT.fullmatch(parked_messages()[0].extra["LastError"])


def test_redeliver_stops_at_its_deadline_and_counts_the_rows_it_did_not_reach() -> None:
    keys = park("hangs", "next", "last")
    report = redeliver(keys, deadline=time.monotonic() + 0.5)
    assert (report.failed, report.unreached, report.stopped_by) == (1, 2, "time budget")
    assert parked_messages()[0].extra["Attempts"] == 1


# --- the bound on hung handler threads -------------------------------------------------


def test_past_the_bound_of_hung_handlers_the_drain_stops_leaving_the_message_untouched(
    settings: Any, monkeypatch: Any
) -> None:
    monkeypatch.setattr(timeouts, "MAX_HUNG_HANDLERS", 2)
    settings.DEADLETTER_HANDLER_TIMEOUT = 0.2
    park("hang 1", "hang 2", "waits")
    report = Drainer().run()
    assert (report.failed, report.stopped_by) == (2, "hung handlers")
    assert drain.hung_handlers() == 2
    assert parked_messages()[2].extra == {}
    release.set()
    wait_for(lambda: drain.hung_handlers() == 0)
    assert Drainer().run().delivered == 3


def test_an_abandoned_handler_that_returns_later_is_ignored(settings: Any) -> None:
    settings.DEADLETTER_HANDLER_TIMEOUT = 0.2
    (key,) = park("hangs")
    assert drain.deliver(fetch_failed_msgs("q")[0], handler, timeout=0.2) is Outcome.FAILED
    release.set()
    wait_for(lambda: drain.hung_handlers() == 0)
    assert parked_messages()[0].extra["Attempts"] == 1


# --- checks E010 and E011 --------------------------------------------------------------


def ids(errors: list[Any]) -> list[str]:
    return [e.id for e in errors]


def test_the_default_time_limits_pass_the_checks() -> None:
    assert check_time_limits() == []


@pytest.mark.parametrize("value", [0, -5, "30", True, float("inf")])
def test_e010_handler_timeout_must_be_none_or_positive_seconds(settings: Any, value: Any) -> None:
    settings.DEADLETTER_HANDLER_TIMEOUT = value
    assert ids(check_time_limits()) == ["deadletter.E010"]


@pytest.mark.parametrize("name", ["ADMIN_TIME_BUDGET", "API_TIME_BUDGET"])
@pytest.mark.parametrize("value", [-1, "5", None, False])
def test_e011_a_time_budget_must_be_seconds_of_at_least_zero(
    settings: Any, name: str, value: Any
) -> None:
    setattr(settings, f"DEADLETTER_{name}", value)
    (error,) = check_time_limits()
    assert error.id == "deadletter.E011"
    assert f"DEADLETTER_{name}" in error.msg


@pytest.mark.heavy
def test_manage_py_check_reports_the_time_limit_checks(tmp_path: Path) -> None:
    (tmp_path / "bad_limits.py").write_text(
        "from project.settings import *  # noqa: F403\n"
        "DEADLETTER_HANDLER_TIMEOUT = -1\n"
        "DEADLETTER_API_TIME_BUDGET = 'soon'\n"
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=REPO,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": f"{REPO}:{tmp_path}",
            "DJANGO_SETTINGS_MODULE": "bad_limits",
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert "deadletter.E010" in done.stderr
    assert "deadletter.E011" in done.stderr
