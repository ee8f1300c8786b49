"""The `dev` script as a newcomer meets it: help that is only help, `serve` that
refuses a taken port before touching anything, `manage` with the caller's paths."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from tests.factories import REPO

pytestmark = pytest.mark.slow


def dev(
    *args: str, cwd: Path = REPO, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(REPO / "dev"), *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_help_is_the_usage_and_nothing_else() -> None:
    result = dev("help")
    assert result.returncode == 0
    assert "./dev serve [[ADDR:]PORT]" in result.stdout
    assert "set -euo" not in result.stdout


def test_serve_refuses_a_taken_port_before_touching_the_database(tmp_path: Path) -> None:
    database = tmp_path / "demo.sqlite3"
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = dev("serve", f"127.0.0.1:{port}", env={"DEADLETTER_SQLITE_PATH": str(database)})
    assert result.returncode == 1
    assert f"127.0.0.1:{port} is taken" in result.stderr
    assert "Admin login" not in result.stdout
    assert not database.exists()


def test_serve_takes_a_bare_port_as_runserver_does(tmp_path: Path) -> None:
    """Checked on a taken port, so that no server starts: the refusal names the
    address the bare port stands for."""
    database = tmp_path / "demo.sqlite3"
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = dev("serve", str(port), env={"DEADLETTER_SQLITE_PATH": str(database)})
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"dev serve: 127.0.0.1:{port} is taken (Address already in use); "
        "try ./dev serve 127.0.0.1:8001"
    ]
    assert not database.exists()


@pytest.mark.parametrize(
    ("addr", "says"),
    [
        ("localhost:99999", "port 99999 of 'localhost:99999' is not between 1 and 65535"),
        ("localhost:http", "'localhost:http' is not PORT or ADDR:PORT"),
        ("no-such-host.invalid:8000", "cannot find the address 'no-such-host.invalid'"),
    ],
)
def test_serve_refuses_a_bad_address_in_one_line_before_touching_the_database(
    tmp_path: Path, addr: str, says: str
) -> None:
    database = tmp_path / "demo.sqlite3"
    result = dev("serve", addr, env={"DEADLETTER_SQLITE_PATH": str(database)})
    (line,) = result.stderr.strip().splitlines()
    assert result.returncode == 1
    assert line.startswith(f"dev serve: {says}")
    assert not database.exists()


@pytest.mark.django_db(transaction=True)
def test_manage_writes_a_relative_path_where_the_caller_is(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    result = dev("manage", "deadletter_dump", "-o", "dump.ndjson", cwd=tmp_path, env=subprocess_env)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "dump.ndjson").exists()
    assert not (REPO / "dump.ndjson").exists()
