from __future__ import annotations

import shutil
import sqlite3
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from deadletter.models import QueuedMessage
from deadletter.transfer import kvfile
from deadletter.wire import codec
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message
from tests.factories import manage_py
from tests.transfer.test_kvfile import sqlite_file

pytestmark = pytest.mark.django_db(transaction=True)

QUEUED = GoTime.parse("2026-11-29T11:00:00Z")


@pytest.fixture
def go_db(manifest: dict[str, Any], fixtures_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copy(fixtures_dir / manifest["db"]["file"], tmp_path))


def run(*args: str) -> str:
    out = StringIO()
    call_command("deadletter_import_kv", *args, stdout=out)
    return out.getvalue()


def row_count() -> int:
    return QueuedMessage.objects.count()


def test_prints_a_table_of_counts_per_queue(go_db: Path) -> None:
    assert run(str(go_db)).splitlines() == [
        f"Imported 6 messages from {go_db}",
        "queue           rows  messages  imported  present  corrupt",
        "discord-queue      1         3         3        0        0",
        "telegram-queue     3         3         3        0        0",
        "total              4         6         6        0        0",
    ]


def test_a_second_run_imports_nothing_twice(go_db: Path) -> None:
    run(str(go_db))
    output = run(str(go_db))
    assert output.splitlines()[0] == f"Imported 0 messages from {go_db}"
    assert "total              4         6         0        6        0" in output
    assert row_count() == 6


def test_dry_run_says_what_it_would_import_and_writes_nothing(go_db: Path) -> None:
    output = run(str(go_db), "--dry-run")
    assert output.splitlines()[0] == f"Would import 6 messages from {go_db} (dry run)"
    assert row_count() == 0


def test_queue_option_picks_queues_and_repeats(go_db: Path) -> None:
    output = run(str(go_db), "--queue", "telegram-queue")
    assert [line.split()[0] for line in output.splitlines()[2:]] == ["telegram-queue", "total"]
    run(str(go_db), "--queue", "telegram-queue", "--queue", "discord-queue")
    assert row_count() == 6


def test_corrupt_rows_show_in_the_table_and_stay_out(tmp_path: Path) -> None:
    path = tmp_path / "go.sqlite"
    conn = sqlite3.connect(path)
    for statement in kvfile.KV_SCHEMA:
        conn.execute(statement)
    conn.executemany(
        "INSERT INTO kv (key, value) VALUES (?, ?)",
        [(b"q", b"corrupted cbor data"), (b"r", codec.encode([Message(queued_at=QUEUED)]))],
    )
    conn.commit()
    conn.close()
    lines = run(str(path)).splitlines()
    assert lines[2].split() == ["q", "1", "0", "0", "0", "1"]
    assert lines[3].split() == ["r", "1", "1", "1", "0", "0"]
    assert row_count() == 1


@pytest.mark.parametrize(
    ("name", "prepare", "extra", "message"),
    [
        ("missing.sqlite", None, [], "{path}: no such file"),
        (".", None, [], "{path}: is a directory, not an SQLite file"),
        (
            "notes.txt",
            lambda p: p.write_text("not a database"),
            [],
            "{path}: not an SQLite database",
        ),
        (
            "other.sqlite",
            lambda p: sqlite_file(p, "CREATE TABLE other (x)"),
            [],
            "{path}: no kv table",
        ),
        (
            "narrow.sqlite",
            lambda p: sqlite_file(p, "CREATE TABLE kv (key BLOB PRIMARY KEY, value BLOB)"),
            [],
            "{path}: table kv has columns",
        ),
        ("go.sqlite", "fixture", ["--queue", "nope"], "{path} has no queue named 'nope'"),
    ],
    ids=["missing", "directory", "not sqlite", "no kv table", "other columns", "unknown queue"],
)
def test_bad_input_is_a_command_error_and_nothing_is_written(
    go_db: Path, name: str, prepare: Any, extra: list[str], message: str
) -> None:
    path = go_db if prepare == "fixture" else go_db.parent / name
    if callable(prepare):
        prepare(path)
    with pytest.raises(CommandError) as error:
        run(str(path), *extra)
    assert str(error.value).startswith(message.format(path=path))
    assert row_count() == 0


@pytest.mark.slow
def test_from_the_shell_bad_input_is_one_line_on_stderr_and_a_non_zero_exit(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    missing = tmp_path / "missing.sqlite"
    result = manage_py("deadletter_import_kv", str(missing), env=subprocess_env)
    assert result.returncode != 0
    assert result.stderr.splitlines() == [f"CommandError: {missing}: no such file"]
    assert result.stdout == ""
    assert row_count() == 0


def test_messages_first_failed_in_the_future_are_said_in_the_summary_and_a_column(
    tmp_path: Path,
) -> None:
    path = tmp_path / "go.sqlite"
    conn = sqlite3.connect(path)
    for statement in kvfile.KV_SCHEMA:
        conn.execute(statement)
    ahead = Message(subject="ahead", queued_at=GoTime.parse("9999-12-15T00:00:00Z"))
    conn.executemany(
        "INSERT INTO kv (key, value) VALUES (?, ?)",
        [(b"q", codec.encode([Message(queued_at=QUEUED), ahead]))],
    )
    conn.commit()
    conn.close()
    lines = run(str(path)).splitlines()
    assert lines[0] == (
        f"Imported 1 messages from {path}; 1 messages whose first failure is in the future "
        "were left in the file (the Go program's clock?)"
    )
    assert lines[1].split() == [
        "queue",
        "rows",
        "messages",
        "imported",
        "present",
        "corrupt",
        "future",
    ]
    assert lines[2].split() == ["q", "1", "2", "1", "0", "0", "1"]
    assert row_count() == 1
