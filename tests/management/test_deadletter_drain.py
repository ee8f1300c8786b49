"""`manage.py deadletter_drain`: arguments, exit status, output, signals, SIGKILL."""

from __future__ import annotations

import argparse
import contextlib
import http.server
import io
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from deadletter.drain import DrainReport
from deadletter.management.commands.deadletter_drain import Command, rate, seconds
from deadletter.models import QueuedMessage
from deadletter.queue import fetch_failed_msgs
from deadletter.wire import keys
from deadletter.wire.messages import Message
from project.demo import handlers as demo_handlers
from tests.drain.drain_harness import (
    Drain,
    assert_only_messages_in_hand_were_delivered_twice,
    kill_once_recorded,
    recorded,
)
from tests.factories import REPO, manage_py, park, parked

pytestmark = pytest.mark.django_db(transaction=True)


# --- in-process: arguments, exit status, output ------------------------------------


@pytest.fixture
def handlers(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {
        "q": "tests.factories.ok_handler",
        "bad": "tests.factories.failing_handler",
    }


def run(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("deadletter_drain", *args, stdout=out, stderr=out)
    except CommandError as exc:
        return exc.returncode, out.getvalue() + str(exc)
    return 0, out.getvalue()


def test_exit_zero_and_a_summary_when_everything_was_delivered(handlers: None) -> None:
    park("one", "two")
    code, out = run()
    assert code == 0
    assert "delivered:    2" in out
    assert parked() == []


def test_exit_one_when_a_message_stayed_failed(handlers: None) -> None:
    park("stuck", queue="bad")
    code, out = run()
    assert code == 1
    assert "still failed: 1" in out


def test_exit_two_for_a_handler_that_does_not_import(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.nowhere.handler"}
    park("untouched")
    code, out = run()
    assert code == 2
    assert "does not import" in out
    assert parked() == ["untouched"]


def test_exit_two_for_a_queue_without_a_handler(handlers: None) -> None:
    code, out = run("--queue", "unknown")
    assert code == 2
    assert "no handler configured" in out


def test_exit_two_for_workers_on_sqlite_with_the_reason(handlers: None) -> None:
    if connection.vendor != "sqlite":
        pytest.skip("SQLite rule")
    code, out = run("--workers", "2")
    assert code == 2
    assert "needs PostgreSQL" in out


def test_queue_option_limits_the_drain_to_that_queue(handlers: None) -> None:
    park("one")
    park("stuck", queue="bad")
    code, _ = run("--queue", "q")
    assert (code, parked(), parked("bad")) == (0, [], ["stuck"])


def test_limit_option_caps_the_deliveries(handlers: None) -> None:
    park("one", "two", "three")
    run("--limit", "2")
    assert parked() == ["three"]


def test_json_format_prints_the_summary_as_one_object(handlers: None) -> None:
    park("one")
    park("stuck", queue="bad")
    code, out = run("--format", "json")
    summary = json.loads(out.splitlines()[0])
    assert (summary["delivered"], summary["failed"]) == (1, 1)
    assert set(summary["dropped"]) == {"expired", "corrupt", "permanent", "max_attempts"}
    assert "elapsed" in summary


def test_dry_run_says_what_it_would_do_and_changes_nothing(handlers: None) -> None:
    park("one")
    QueuedMessage.objects.create(key=keys.new_key("q"), value=b"corrupted cbor data")
    code, out = run("--dry-run", "--queue", "q")
    assert code == 0
    assert "Would hand" in out and "'one'" in out
    assert "Would drop corrupt row" in out
    assert QueuedMessage.objects.count() == 2


def test_rate_accepts_per_second_minute_and_hour() -> None:
    assert (rate("10/s"), rate("10"), rate("120/m"), rate("3600/h")) == (10, 10, 2, 1)


@pytest.mark.parametrize("text", ["0/s", "fast", "-1/s", "10/d"])
def test_rate_rejects_anything_else(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        rate(text)


def test_usage_error_exits_two_from_the_command_line(subprocess_env: dict[str, str]) -> None:
    result = manage_py("deadletter_drain", "--rate", "fast", env=subprocess_env, timeout=60)
    assert result.returncode == 2
    assert "not a rate" in result.stderr


# --- the demo handlers -------------------------------------------------------------


@pytest.fixture
def webhook_server() -> Iterator[tuple[str, list[bytes]]]:
    got: list[bytes] = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/demo/webhook/", got
    server.shutdown()
    server.server_close()


def test_demo_webhook_handler_delivers_to_a_listening_endpoint(
    settings: Any, webhook_server: tuple[str, list[bytes]]
) -> None:
    url, got = webhook_server
    settings.DEMO_WEBHOOK_URL = url
    park("Ocjena", queue="webhook-queue")
    code, _ = run("--queue", "webhook-queue")
    assert code == 0
    assert json.loads(got[0])["subject"] == "Ocjena"


def test_demo_webhook_handler_leaves_the_message_when_nothing_listens(settings: Any) -> None:
    settings.DEMO_WEBHOOK_URL = "http://127.0.0.1:9/demo/webhook/"
    park("Ocjena", queue="webhook-queue")
    code, _ = run("--queue", "webhook-queue")
    (stayed,) = fetch_failed_msgs("webhook-queue")
    assert code == 1
    assert stayed.msg.extra["Attempts"] == 1
    assert stayed.msg.extra["LastError"].startswith("URLError")


def test_demo_webhook_view_accepts_a_json_message(client: Any) -> None:
    payload = demo_handlers.as_json(Message(subject="Ocjena"))
    response = client.post("/demo/webhook/", payload, content_type="application/json")
    assert response.status_code == 200


# --- real processes: signals and crashes -----------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_first_signal_finishes_the_message_in_hand_then_stops_with_the_summary(
    subprocess_env: dict[str, str], tmp_path: Path, signum: int
) -> None:
    park("one", "two", "three")
    drain = Drain.gated(subprocess_env, tmp_path)
    drain.wait_for(drain.in_hand.exists)
    drain.proc.send_signal(signum)
    drain.wait_for(lambda: "stopping after the message in hand" in drain.output())
    drain.gate.touch()
    assert drain.wait() == 0
    assert recorded(drain.record) == ["one:-"]
    assert parked() == ["two", "three"]
    assert f"stopped early by {signal.Signals(signum).name}" in drain.output()


@pytest.mark.slow
def test_second_signal_stops_at_once_and_the_row_in_hand_stays_queued(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    park("one", "two")
    drain = Drain.gated(subprocess_env, tmp_path)
    drain.wait_for(drain.in_hand.exists)
    drain.proc.send_signal(signal.SIGTERM)
    drain.wait_for(lambda: "stopping after the message in hand" in drain.output())
    drain.proc.send_signal(signal.SIGTERM)
    assert drain.wait() == 128 + signal.SIGTERM
    assert recorded(drain.record) == []
    (first, _) = fetch_failed_msgs("q")
    assert (first.msg.subject, first.msg.extra) == ("one", {})
    assert "aborted by a second SIGTERM" in drain.output()


@pytest.mark.slow
def test_a_second_drain_of_the_same_sqlite_queue_exits_two_saying_why(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    if connection.vendor != "sqlite":
        pytest.skip("SQLite only: PostgreSQL drains share a queue by claiming rows")
    park("one", "two")
    first = Drain.gated(subprocess_env, tmp_path)
    first.wait_for(first.in_hand.exists)
    second = Drain(subprocess_env, tmp_path)
    assert second.wait() == 2
    assert "being drained by another process" in second.output()
    first.gate.touch()
    assert first.wait() == 0
    assert sorted(recorded(first.record)) == ["one:-", "two:-"]


def _another_name(kind: str, tmp: Path) -> str:
    """A DATABASE_URL reaching this test's SQLite file under another spelling."""
    from django.db import connection as conn

    real = Path(conn.settings_dict["NAME"]).resolve()
    if kind == "symlink":
        link = tmp / "through-a-link.sqlite3"
        link.symlink_to(real)
        return f"sqlite:///{link}"
    return f"sqlite:///{os.path.relpath(real, REPO)}"  # the child's cwd


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["symlink", "relative path"])
def test_a_second_drain_reaching_the_file_by_another_name_is_refused(
    subprocess_env: dict[str, str], tmp_path: Path, kind: str
) -> None:
    if connection.vendor != "sqlite":
        pytest.skip("SQLite only: PostgreSQL drains share a queue by claiming rows")
    park("one", "two")
    first = Drain.gated(subprocess_env, tmp_path)
    first.wait_for(first.in_hand.exists)
    second = Drain({**subprocess_env, "DATABASE_URL": _another_name(kind, tmp_path)}, tmp_path)
    assert second.wait() == 2
    assert "being drained by another process" in second.output()
    first.gate.touch()
    assert first.wait() == 0
    assert recorded(first.record) == ["one:-", "two:-"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["symlink", "relative path"])
def test_a_waiting_drain_by_another_name_delivers_nothing_twice_and_keeps_the_order(
    subprocess_env: dict[str, str], tmp_path: Path, kind: str
) -> None:
    if connection.vendor != "sqlite":
        pytest.skip("SQLite only: PostgreSQL drains share a queue by claiming rows")
    subjects = [f"m{i:02d}" for i in range(30)]
    park(*subjects)
    first = Drain.gated(subprocess_env, tmp_path)
    first.wait_for(first.in_hand.exists)
    other = {**subprocess_env, "DATABASE_URL": _another_name(kind, tmp_path)}
    second = Drain(other, tmp_path, "--wait")
    time.sleep(0.5)
    assert second.proc.poll() is None  # waiting, not draining beside the first
    first.gate.touch()
    assert first.wait() == 0
    assert second.wait() == 0
    assert recorded(first.record) == [f"{subject}:-" for subject in subjects]
    assert parked() == []


@pytest.mark.slow
@pytest.mark.loops
def test_sigkill_at_random_points_loses_nothing_and_duplicates_only_the_message_in_hand(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    """20 drains killed with SIGKILL at random points, then drains to the end.
    Half the messages go to two recipients (a partial delivery re-parks the
    rest at the tail). The handler records each delivery durably before it
    returns, so the only delivery that may be recorded twice is the last one
    recorded before a kill: the message in hand, whose row was not yet settled.
    The queue is topped up whenever it runs low: on a loaded machine a kill may
    come many deliveries after its target, and every kill must find work."""
    rng = random.Random(os.environ.get("DRAIN_CRASH_SEED", time.time_ns()))
    expected: set[str] = set()

    def top_up() -> None:
        subjects = [f"m{len(expected):04d}-{i:02d}" for i in range(40)]
        park(*subjects[:20])
        park(*subjects[20:], fields=["a", "b"])  # two recipients
        expected.update(f"{s}:-" for s in subjects[:20])
        expected.update(f"{s}:{r}" for s in subjects[20:] for r in ("a", "b"))

    top_up()
    top_up()
    record = tmp_path / "record.txt"
    in_hand_at_kill: Counter[str] = Counter()
    kills = 0
    while kills < 20:
        if len(parked()) < 10:
            top_up()
        before = len(recorded(record))
        drain = Drain(subprocess_env, tmp_path, DRAIN_PAUSE="0.002")
        if not kill_once_recorded(drain, before + rng.randint(1, 4), 0.004, rng):
            continue  # the queue ran dry before this kill
        kills += 1
        lines = recorded(record)
        if lines:
            in_hand_at_kill[lines[-1]] += 1
    print(f"deliveries recorded by the {kills} kills: {len(recorded(record))} of {len(expected)}")
    for _ in range(10):
        if not parked():
            break
        assert Drain(subprocess_env, tmp_path).wait() == 0
    deliveries = Counter(recorded(record))
    assert kills == 20
    assert parked() == []
    assert set(deliveries) == expected
    assert_only_messages_in_hand_were_delivered_twice(deliveries, in_hand_at_kill)


@pytest.mark.slow
def test_a_terminal_gets_a_progress_bar(subprocess_env: dict[str, str], tmp_path: Path) -> None:
    import fcntl
    import pty
    import struct
    import termios

    park("one", "two")
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    env = {
        **subprocess_env,
        "PYTHONPATH": f"{REPO}:{tmp_path}",
        "DJANGO_SETTINGS_MODULE": "drain_test_settings",
        "DRAIN_RECORD": str(tmp_path / "record.txt"),
    }
    (tmp_path / "drain_test_settings.py").write_text(
        "from project.settings import *  # noqa: F403\n"
        "DEADLETTER_HANDLERS = {'q': 'tests.drain.drain_harness.recording_handler'}\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "deadletter_drain"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=secondary,
    )
    os.close(secondary)
    screen = b""
    with contextlib.suppress(OSError):  # EIO once the child closed the terminal
        while chunk := os.read(primary, 4096):
            screen += chunk
    os.close(primary)
    assert proc.wait(timeout=60) == 0
    assert b"draining: 100%" in screen
    assert b"2/2" in screen


# --- --grace: the first signal stops a hanging handler too --------------------------------


def test_grace_defaults_to_ten_seconds() -> None:
    parser = Command().create_parser("manage.py", "deadletter_drain")
    assert parser.parse_args([]).grace == 10.0
    assert parser.parse_args(["--grace", "2.5"]).grace == 2.5


@pytest.mark.parametrize("text", ["-1", "soon", "inf", "nan"])
def test_grace_refuses_anything_but_seconds_of_at_least_zero(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        seconds(text)


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_one_sigterm_stops_hanging_handlers_after_the_grace_and_leaves_their_rows(
    subprocess_env: dict[str, str], tmp_path: Path, workers: int
) -> None:
    """Each handler waits for a gate that never opens: without the grace the
    drain would never end after one SIGTERM."""
    if workers > 1 and connection.vendor == "sqlite":
        pytest.skip("--workers needs PostgreSQL or MySQL/MariaDB")
    park("one", "two")
    drain = Drain.gated(subprocess_env, tmp_path, "--workers", str(workers), "--grace", "1")
    drain.wait_for(
        lambda: drain.in_hand.exists() and len(drain.in_hand.read_text().splitlines()) == workers
    )
    drain.proc.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    assert drain.wait() == 128 + signal.SIGTERM, drain.output()
    assert time.monotonic() - sent < 30
    assert "grace ran out" in drain.output()
    assert recorded(drain.record) == []
    assert [(q.msg.subject, q.msg.extra) for q in fetch_failed_msgs("q")] == [
        ("one", {}),
        ("two", {}),
    ]


# --- a drain that cannot do its job says so -------------------------------------------------


def test_a_parked_queue_without_a_handler_is_named_and_the_exit_status_is_one(
    handlers: None,
) -> None:
    park("one")
    park("lost", "found", queue="orphan")
    code, out = run()
    assert code == 1
    assert "no handler in DEADLETTER_HANDLERS (left untouched): orphan (2 row(s))" in out
    assert (parked(), parked("orphan")) == ([], ["lost", "found"])


def test_with_no_handler_at_all_parked_queues_are_named_and_nothing_is_touched(
    settings: Any,
) -> None:
    settings.DEADLETTER_HANDLERS = {}
    park("lost", queue="orphan")
    code, out = run()
    assert code == 2
    assert "nothing to drain" in out and "orphan (1 row(s))" in out
    assert "Drained" not in out


@pytest.mark.slow
def test_forever_refuses_to_start_when_no_queue_has_a_handler(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "no_handlers_settings.py").write_text(
        "from project.settings import *  # noqa: F403\nDEADLETTER_HANDLERS = {}\n"
    )
    env = {
        **subprocess_env,
        "PYTHONPATH": f"{REPO}:{tmp_path}",
        "DJANGO_SETTINGS_MODULE": "no_handlers_settings",
    }
    result = manage_py("deadletter_drain", "--forever", env=env, timeout=60)
    assert result.returncode == 2
    assert "--forever would never hand anything over" in result.stderr


def test_no_handler_and_nothing_parked_says_there_was_nothing_to_drain(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {}
    code, out = run()
    assert code == 0
    assert out.startswith("Nothing to drain")


def test_the_json_summary_names_parked_queues_without_a_handler(handlers: None) -> None:
    park("lost", queue="orphan")
    code, out = run("--format", "json")
    assert code == 1
    assert json.loads(out.splitlines()[0])["no_handler"] == {"orphan": 1}


def test_a_dry_run_names_parked_queues_without_a_handler(handlers: None) -> None:
    park("lost", queue="orphan")
    code, out = run("--dry-run")
    assert code == 0
    assert "Would leave orphan (1 row(s)) untouched: no handler for them" in out


def test_a_pass_that_met_a_database_error_never_says_it_drained() -> None:
    out = io.StringIO()
    Command(stdout=out)._summary(DrainReport(queues=["q"], errors=1), "text")
    assert out.getvalue().startswith("Tried to drain q in 0.00s")
    assert "Drained" not in out.getvalue()


def _service_without_logging(env: dict[str, str], tmp: Path) -> Drain:
    """`--forever` in a child whose settings have no LOGGING, as a fresh project's."""
    (tmp / "no_logging_settings.py").write_text(
        "from project.settings import *  # noqa: F403\n"
        "del LOGGING  # noqa: F821\n"
        "DEADLETTER_HANDLERS = {'q': 'tests.factories.ok_handler'}\n"
    )
    return Drain(
        env, tmp, "--forever", "--interval", "1", DJANGO_SETTINGS_MODULE="no_logging_settings"
    )


@pytest.mark.slow
def test_forever_prints_a_line_a_pass_without_logging_settings(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    park("one")
    drain = _service_without_logging(subprocess_env, tmp_path)
    try:
        drain.wait_for(lambda: " pass 3: " in drain.stdout.read_text())
        drain.proc.send_signal(signal.SIGTERM)
        assert drain.wait() == 0, drain.output()
    finally:
        drain.proc.kill()
    beats = [line for line in drain.stdout.read_text().splitlines() if " pass " in line]
    assert "pass 1: 1 delivered, 0 failed, 0 waiting" in beats[0]
    assert "pass 2: 0 delivered" in beats[1]
    assert "INFO" not in drain.output()  # no LOGGING indeed: the log's INFO lines go nowhere


@pytest.mark.slow
def test_forever_warns_each_pass_about_parked_queues_without_a_handler(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    park("lost", queue="orphan")
    drain = _service_without_logging(subprocess_env, tmp_path)
    try:
        drain.wait_for(lambda: drain.stderr.read_text().count("queues=orphan (1 row(s))") >= 2)
        drain.proc.send_signal(signal.SIGTERM)
        assert drain.wait() == 0, drain.output()
    finally:
        drain.proc.kill()
    assert "drain leaves parked queues with no handler" in drain.stderr.read_text()


@pytest.mark.slow
def test_a_thread_a_handler_leaked_does_not_keep_the_service_past_the_grace(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    """The handler starts a non-daemon thread that sleeps ten minutes: Python would
    wait for it at exit. The service names it and exits with its own status."""
    park("one")
    drain = Drain(
        subprocess_env,
        tmp_path,
        "--forever",
        "--interval",
        "1",
        "--grace",
        "1",
        handler="tests.management.handlers.leaking_handler",
    )
    try:
        drain.wait_for(lambda: "leaked" in drain.output())
        drain.proc.send_signal(signal.SIGTERM)
        assert drain.wait() == 0, drain.output()
    finally:
        drain.proc.kill()
    assert "1 thread(s) left running by a handler outlived the 1 s grace: 'handler-leak'" in (
        drain.stderr.read_text()
    )
