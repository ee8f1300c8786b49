from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from deadletter.models import QueuedMessage
from deadletter.wire import keys
from tests.factories import manage_py, park, table_rows
from tests.transfer.test_kvfile import kv_rows, sqlite_file

pytestmark = pytest.mark.django_db(transaction=True)


def run(*args: str) -> str:
    out = StringIO()
    call_command("deadletter_export_kv", *args, stdout=out)
    return out.getvalue()


def test_writes_every_queue_and_prints_a_table_of_counts(tmp_path: Path) -> None:
    park("one", queue="a")
    park("two", queue="a")
    park("three", queue="b")
    target = tmp_path / "go.sqlite"
    assert run(str(target)).splitlines() == [
        f"Exported 3 messages to {target}",
        "queue  rows  messages  new  replaced  identical  corrupt",
        "a         2         2    2         0          0        0",
        "b         1         1    1         0          0        0",
        "total     3         3    3         0          0        0",
    ]
    assert [(k, v) for k, v, _ in kv_rows(target)] == table_rows()
    assert {expires for _, _, expires in kv_rows(target)} == {None}


def test_a_second_run_writes_nothing_twice(tmp_path: Path) -> None:
    park("one", queue="a")
    target = tmp_path / "go.sqlite"
    run(str(target))
    assert run(str(target)).splitlines()[0] == (
        f"Exported 0 messages to {target}; 1 already in the file with the same bytes, left alone"
    )
    assert len(kv_rows(target)) == 1


def test_queue_option_picks_queues(tmp_path: Path) -> None:
    park("one", queue="a")
    park("two", queue="b")
    target = tmp_path / "go.sqlite"
    run(str(target), "--queue", "b")
    assert [keys.queue_of(k) for k, _, _ in kv_rows(target)] == ["b"]


def test_export_then_import_round_trips_every_message(tmp_path: Path) -> None:
    for i in range(5):
        park(f"message {i}", queue="a")
    park("other", queue="b")
    before = table_rows()
    target = tmp_path / "go.sqlite"
    run(str(target))
    QueuedMessage.objects.all().delete()
    call_command("deadletter_import_kv", str(target), stdout=StringIO())
    assert table_rows() == before


@pytest.mark.parametrize(
    ("target", "prepare", "extra", "message"),
    [
        (".", None, [], "{path}: is a directory"),
        ("no-such-dir/go.sqlite", None, [], "{path}: cannot write"),
        ("a-file/go.sqlite", "file-parent", [], "{path}: cannot write"),
        ("notes.txt", lambda p: p.write_text("mine"), [], "{path}: not an SQLite database"),
        (
            "narrow.sqlite",
            lambda p: sqlite_file(
                p, "CREATE TABLE kv (key BLOB PRIMARY KEY, value TEXT, expires INTEGER)"
            ),
            [],
            "{path}: table kv has columns",
        ),
        ("go.sqlite", None, ["--queue", "nope"], "the queue table has no queue named 'nope'"),
    ],
    ids=["directory", "missing dir", "parent is a file", "not sqlite", "other columns", "queue"],
)
def test_bad_input_is_a_command_error_and_nothing_is_written(
    tmp_path: Path, target: str, prepare: Any, extra: list[str], message: str
) -> None:
    park("one", queue="a")
    path = tmp_path / target
    if prepare == "file-parent":
        (tmp_path / "a-file").write_text("x")
    elif callable(prepare):
        prepare(path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(CommandError) as error:
        run(str(path), *extra)
    assert str(error.value).startswith(message.format(path=path))
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_an_unwritable_path_is_a_command_error() -> None:
    if not Path("/sys").is_dir():
        pytest.skip("no /sys on this system")
    park("one", queue="a")
    with pytest.raises(CommandError, match="cannot write"):
        run("/sys/deadletter-export.sqlite")


@pytest.mark.slow
def test_from_the_shell_bad_input_is_one_line_on_stderr_and_a_non_zero_exit(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    park("one", queue="a")
    result = manage_py("deadletter_export_kv", str(tmp_path), env=subprocess_env)
    assert result.returncode != 0
    assert result.stderr.splitlines() == [
        f"CommandError: {tmp_path}: is a directory, not an SQLite file"
    ]
    assert list(tmp_path.iterdir()) == []


def test_a_row_changed_here_replaces_the_files_and_the_report_says_so(tmp_path: Path) -> None:
    [key] = park("one", queue="a")
    park("two", queue="a")
    target = tmp_path / "go.sqlite"
    run(str(target))
    [changed] = park("changed", queue="b")
    value = QueuedMessage.objects.get(key=changed).value
    QueuedMessage.objects.filter(key=key).update(value=value)
    assert run(str(target)).splitlines() == [
        f"Exported 2 messages to {target}; 1 of them replaced the file's row under the same "
        "key, which held other bytes; 1 already in the file with the same bytes, left alone",
        "queue  rows  messages  new  replaced  identical  corrupt",
        "a         2         2    0         1          1        0",
        "b         1         1    1         0          0        0",
        "total     3         3    1         1          1        0",
    ]
    assert [(k, v) for k, v, _ in kv_rows(target)] == table_rows()
