"""Every deadletter command, run as an operator runs it, on a database it cannot use:
one line that says why (migrate first; the database it could not reach and the
driver's reason), a non-zero exit, and no traceback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db import connection

from deadletter.transfer.ndjson import row_line
from deadletter.wire import codec, keys
from deadletter.wire.messages import Message
from tests.conftest import database_url
from tests.factories import FIXTURES, manage_py

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

COMMANDS = [
    ("deadletter_drain",),
    ("deadletter_drain", "--forever"),
    ("deadletter_dump",),
    ("deadletter_dump", "--queue", "q"),
    ("deadletter_load", "{dump}"),
    ("deadletter_import_kv", "{go_file}"),
    ("deadletter_export_kv", "{tmp}/export.sqlite"),
    ("deadletter_stats",),
]

IDS = [" ".join(a for a in c if "{" not in a) for c in COMMANDS]


def run(command: tuple[str, ...], url: str, tmp: Path, env: dict[str, str]) -> tuple[int, str]:
    dump = tmp / "one.ndjson"
    dump.write_text(row_line(keys.new_key("q"), codec.encode([Message(subject="one")])))
    go_file = FIXTURES / "edb-small.sqlite"
    args = [a.format(dump=dump, tmp=tmp, go_file=go_file) for a in command]
    result = manage_py(*args, env={**env, "DATABASE_URL": url}, timeout=60)
    return result.returncode, (result.stdout + result.stderr).strip()


def with_name(url: str, name: str) -> str:
    return url.rsplit("/", 1)[0] + "/" + name


@pytest.fixture
def unmigrated(tmp_path: Path, subprocess_env: dict[str, str]) -> Iterator[str]:
    """A DATABASE_URL of a database `migrate` never ran in: a fresh SQLite file, or
    an empty database beside the test database on a server."""
    if connection.vendor == "sqlite":
        yield f"sqlite:///{tmp_path / 'fresh.sqlite3'}"
        return
    name = f"{connection.settings_dict['NAME']}_unmigrated"[:63]
    quoted = connection.ops.quote_name(name)
    with connection.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {quoted}")
        cursor.execute(f"CREATE DATABASE {quoted}")
    try:
        yield with_name(database_url(), name)
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {quoted}")


@pytest.fixture
def unreachable(tmp_path: Path, subprocess_env: dict[str, str]) -> tuple[str, str]:
    """A DATABASE_URL nothing answers, and how the error names it: an SQLite file in
    a folder that does not exist, or a server port that refuses connections."""
    if connection.vendor == "sqlite":
        path = tmp_path / "no-such-folder" / "db.sqlite3"
        return f"sqlite:///{path}", str(path)
    parts = urlsplit(database_url())
    netloc = parts.netloc.rsplit("@", 1)[0] + "@127.0.0.1:1"
    name = parts.path.lstrip("/")
    return urlunsplit(parts._replace(netloc=netloc)), f"{name} on 127.0.0.1:1"


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_before_migrate_a_command_says_run_migrate_in_one_line(
    command: tuple[str, ...], unmigrated: str, tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    code, output = run(command, unmigrated, tmp_path, subprocess_env)
    assert code == 1, output
    assert "Traceback" not in output
    assert len(output.splitlines()) == 1, output
    assert "run `manage.py migrate`" in output


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_an_unreachable_database_is_named_with_the_drivers_reason_in_one_line(
    command: tuple[str, ...],
    unreachable: tuple[str, str],
    tmp_path: Path,
    subprocess_env: dict[str, str],
) -> None:
    url, named = unreachable
    code, output = run(command, url, tmp_path, subprocess_env)
    assert code == 1, output
    assert "Traceback" not in output
    assert len(output.splitlines()) == 1, output
    assert f"cannot reach database 'default' ({named}): " in output
