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
    assert "./dev serve [ADDR:PORT]" in result.stdout
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


@pytest.mark.django_db(transaction=True)
def test_manage_writes_a_relative_path_where_the_caller_is(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    result = dev("manage", "deadletter_dump", "-o", "dump.ndjson", cwd=tmp_path, env=subprocess_env)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "dump.ndjson").exists()
    assert not (REPO / "dump.ndjson").exists()
