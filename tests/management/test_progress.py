"""deadletter.management.progress: a bar with rate and ETA on a terminal, nothing otherwise."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
from argparse import ArgumentParser

import pytest

from deadletter.management.progress import add_progress_argument, is_terminal, progress_bar
from tests.factories import REPO


class Terminal(io.StringIO):
    """A text stream that says it is a terminal (what tqdm writes is kept)."""

    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_bar_with_rate_and_eta() -> None:
    stream = Terminal()
    with progress_bar(stream, total=10, desc="dumping") as update:
        for _ in range(10):
            update(1)
    text = stream.getvalue()
    assert "dumping" in text
    assert "10/10" in text
    assert "msg/s" in text  # the rate
    assert "<" in text  # elapsed<remaining: the ETA


def test_piped_output_gets_nothing() -> None:
    stream = io.StringIO()
    with progress_bar(stream, total=10, desc="dumping") as update:
        update(5)
    assert stream.getvalue() == ""
    assert not is_terminal(stream)


def test_no_progress_gets_nothing_even_on_a_terminal() -> None:
    stream = Terminal()
    with progress_bar(stream, total=10, desc="dumping", enabled=False) as update:
        update(5)
    assert stream.getvalue() == ""


def test_the_option_is_no_progress() -> None:
    parser = ArgumentParser()
    add_progress_argument(parser)
    assert parser.parse_args([]).progress is True
    assert parser.parse_args(["--no-progress"]).progress is False


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("flag", [[], ["--no-progress"]])
@pytest.mark.parametrize("command", ["dump", "export", "import"])
def test_a_command_on_a_real_terminal(
    subprocess_env: dict[str, str], tmp_path, flag, command: str
) -> None:
    from django.core.management import call_command

    from deadletter.queue import store_failed_msgs
    from deadletter.wire.messages import Message

    for i in range(3):
        store_failed_msgs("mail", Message(subject=str(i)))
    kv_file = tmp_path / "go.sqlite3"
    if command == "import":
        call_command("deadletter_export_kv", str(kv_file), stdout=io.StringIO())
    args, done, bar = {
        "dump": (
            ["deadletter_dump", "-o", str(tmp_path / "d.ndjson")],
            b"Dumped 3 row(s)",
            b"dumping",
        ),
        "export": (["deadletter_export_kv", str(kv_file)], b"written", b"exporting"),
        "import": (["deadletter_import_kv", str(kv_file)], b"present", b"importing"),
    }[command]
    main, child = pty.openpty()
    proc = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), *args, *flag],
        env=subprocess_env,
        stdin=subprocess.DEVNULL,
        stdout=child,
        stderr=child,
        timeout=120,
        check=True,
    )
    os.close(child)
    seen = b""
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    os.close(main)
    assert proc.returncode == 0
    assert done in seen
    assert (bar in seen and b"3/3" in seen) is (flag == [])
