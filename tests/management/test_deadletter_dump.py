"""manage.py deadletter_dump: NDJSON of the chosen queues, to a file or stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from deadletter.queue import store_failed_msgs
from deadletter.wire.messages import Message
from tests.factories import FIXTURES, REPO, insert, insert_at

pytestmark = pytest.mark.django_db(transaction=True)


def dump(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("deadletter_dump", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def park_fixtures() -> int:
    """Every Go fixture's bytes as a row (several are multi-message rows), plus a
    corrupt row and a legacy aggregate: everything a dump must carry."""
    values = sorted(FIXTURES.glob("*.cbor"))
    for i, path in enumerate(values):
        insert_at("go", 10**18 + i, i, path.read_bytes())
    insert_at("go", 2 * 10**18, 0, b"\xff\xfe corrupt")
    insert(b"go", values[0].read_bytes())
    return len(values) + 2


def test_stdout_carries_one_line_a_row_and_nothing_else() -> None:
    store_failed_msgs("mail", Message(subject="hello"))
    store_failed_msgs("hooks", Message(subject="hi"))
    out, err = dump()
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(x["queue"], x["Subject"]) for x in lines] == [("hooks", "hi"), ("mail", "hello")]
    assert err == ""  # not a terminal: no bar


def test_only_the_chosen_queues(tmp_path: Path) -> None:
    store_failed_msgs("mail", Message(subject="hello"))
    store_failed_msgs("hooks", Message(subject="hi"))
    out, _ = dump("--queue", "mail")
    assert [json.loads(x)["queue"] for x in out.splitlines()] == ["mail"]


def test_output_file_is_written_whole_and_said(tmp_path: Path) -> None:
    n = park_fixtures()
    target = tmp_path / "dump.ndjson"
    out, err = dump("-o", str(target))
    assert out == ""
    assert f"Dumped {n} row(s)" in err
    assert len(target.read_text().splitlines()) == n
    assert [p.name for p in tmp_path.iterdir()] == ["dump.ndjson"]


def test_an_unwritable_file_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="could not write"):
        dump("-o", str(tmp_path / "missing-dir" / "dump.ndjson"))


def test_an_invalid_queue_name_is_a_usage_error() -> None:
    with pytest.raises(CommandError, match="empty"):
        dump("--queue", "")


def test_dump_load_into_an_empty_database_dump_again_is_the_same_file(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    park_fixtures()
    for i in range(3):
        store_failed_msgs("mail", Message(subject=f"m{i}", extra={"Blob": b"\x00", "N": i}))
    first = tmp_path / "first.ndjson"
    dump("-o", str(first))
    # A fresh SQLite database in another process: migrate, load, dump.
    env = {**subprocess_env, "DATABASE_URL": f"sqlite:///{tmp_path / 'fresh.sqlite3'}"}
    manage = [sys.executable, str(REPO / "manage.py")]
    second = tmp_path / "second.ndjson"
    for args in (
        ["migrate", "-v", "0"],
        ["deadletter_load", str(first)],
        ["deadletter_dump", "-o", str(second)],
    ):
        subprocess.run([*manage, *args], env=env, check=True, capture_output=True, timeout=300)
    assert second.read_bytes() == first.read_bytes()


def test_the_same_round_trip_in_this_database(tmp_path: Path) -> None:
    park_fixtures()
    first = tmp_path / "first.ndjson"
    dump("-o", str(first))
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM deadletter_queuedmessage")
    call_command("deadletter_load", str(first), stdout=StringIO())
    second = tmp_path / "second.ndjson"
    dump("-o", str(second))
    assert second.read_bytes() == first.read_bytes()
    assert os.path.getsize(first) > 0


def test_an_unknown_queue_is_an_error_naming_it() -> None:
    store_failed_msgs("mail", Message(subject="hello"))
    with pytest.raises(CommandError, match="no queue 'nope'") as raised:
        dump("--queue", "mail", "--queue", "nope")
    assert raised.value.returncode == 2


def test_a_queue_with_a_handler_and_no_row_dumps_nothing(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"mail": "tests.factories.ok_handler"}
    assert dump("--queue", "mail") == ("", "")


def test_search_dumps_only_the_matches_in_key_order() -> None:
    for subject in ("refund failed", "charge failed", "refund again"):
        store_failed_msgs("q", Message(subject=subject))
    store_failed_msgs("other", Message(subject="refund elsewhere"))
    out, _ = dump("--queue", "q", "--search", "refund", "--no-progress")
    assert [json.loads(line)["Subject"] for line in out.splitlines()] == [
        "refund failed",
        "refund again",
    ]


def test_a_search_that_cannot_run_is_a_command_error_and_nothing_written(tmp_path: Path) -> None:
    target = tmp_path / "dump.ndjson"
    with pytest.raises(CommandError, match="--search: a quote is not closed"):
        dump("--search", '"open', "-o", str(target))
    assert not target.exists()
