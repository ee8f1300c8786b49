"""manage.py deadletter_load: keys kept, a second load adds nothing, a bad line loads nothing."""

from __future__ import annotations

import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from deadletter import codec, keys, ndjson
from deadletter.messages import Message
from tests.conftest import REPO

pytestmark = pytest.mark.django_db(transaction=True)


def line(i: int, subject: str = "s") -> str:
    return ndjson.row_line(
        keys.make_key("mail", 10**18 + i, i), codec.encode_one(Message(subject=subject))
    )


def load(*args: str) -> str:
    out, err = StringIO(), StringIO()
    call_command("deadletter_load", *args, stdout=out, stderr=err)
    assert err.getvalue() == ""  # not a terminal: no bar
    return out.getvalue()


def count() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM deadletter_queuedmessage")
        return int(cursor.fetchone()[0])


def test_a_load_says_what_it_added_and_a_second_adds_nothing(tmp_path: Path) -> None:
    path = tmp_path / "d.ndjson"
    path.write_text("".join(line(i) for i in range(4)))
    assert "Loaded 4 new row(s) of 4" in load(str(path))
    assert "Loaded 0 new row(s) of 4" in load(str(path))
    assert count() == 4


def test_a_malformed_line_names_its_number_and_loads_nothing(tmp_path: Path) -> None:
    path = tmp_path / "d.ndjson"
    path.write_text(line(1) + line(2) + '{"key": "00", "queue"\n' + line(3))
    with pytest.raises(CommandError, match=r"d.ndjson: line 3: not JSON.*nothing was loaded"):
        load(str(path))
    assert count() == 0


def test_a_bad_line_after_many_batches_still_loads_nothing(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(ndjson, "BATCH", 2)
    path = tmp_path / "d.ndjson"
    path.write_text("".join(line(i) for i in range(7)) + "[]\n")
    with pytest.raises(CommandError, match="line 8"):
        load(str(path))
    assert count() == 0


def test_a_missing_file_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="could not read"):
        load(str(tmp_path / "nothing.ndjson"))


def test_stdin_loads_too(tmp_path: Path, subprocess_env: dict[str, str]) -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "deadletter_load", "-"],
        input=line(1) + line(2),
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "Loaded 2 new row(s) of 2 in -" in result.stdout
    assert result.stderr == ""  # piped: no progress bar
    assert count() == 2
