"""manage.py deadletter_load: keys kept, a second load adds nothing, a bad line loads nothing."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from deadletter.transfer import ndjson
from deadletter.wire import codec, keys
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message
from tests.factories import manage_py, raw_sql

pytestmark = pytest.mark.django_db(transaction=True)


def key_of(i: int) -> bytes:
    return keys.make_key("mail", 10**18 + i, i)


def encoded(msg: Message) -> bytes:
    return codec.encode_one(msg)


def line(i: int, subject: str = "s") -> str:
    return ndjson.row_line(key_of(i), encoded(Message(subject=subject)))


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
    result = manage_py(
        "deadletter_load", "-", input=line(1) + line(2), env=subprocess_env, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "Loaded 2 new row(s) of 2 in -" in result.stdout
    assert result.stderr == ""  # piped: no progress bar
    assert count() == 2


def test_a_line_nested_100k_deep_is_one_line_error_and_a_non_zero_exit(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    path = tmp_path / "d.ndjson"
    key = key_of(9).hex()
    deep = "[" * 100_000 + "]" * 100_000
    path.write_text(line(1) + f'{{"key": "{key}", "queue": "mail", "extra": {{"x": {deep}}}}}\n')
    result = manage_py("deadletter_load", str(path), env=subprocess_env, timeout=120)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"CommandError: {path}: line 2: nested too deeply to read; nothing was loaded"
    ]
    assert count() == 0


def test_a_row_over_the_size_limit_loads_nothing(tmp_path: Path, settings) -> None:
    settings.DEADLETTER_MAX_ROW_BYTES = 1000
    path = tmp_path / "d.ndjson"
    path.write_text(line(1) + line(2, subject="x" * 2000))
    with pytest.raises(
        CommandError, match=r"line 2: the row is 2,\d{3} bytes, over DEADLETTER_MAX_ROW_BYTES"
    ):
        load(str(path))
    assert count() == 0


def test_a_first_failure_in_the_future_loads_nothing(tmp_path: Path) -> None:
    ahead = Message(subject="ahead", queued_at=GoTime.parse("9999-12-15T00:00:00Z"))
    path = tmp_path / "d.ndjson"
    path.write_text(line(1) + ndjson.row_line(key_of(2), encoded(ahead)))
    with pytest.raises(CommandError, match="line 2: the message: queued_at 9999-12-15.* future"):
        load(str(path))
    assert count() == 0


def test_conflicting_keys_are_counted_apart_left_as_queued_and_exit_non_zero(
    tmp_path: Path,
) -> None:
    path = tmp_path / "d.ndjson"
    path.write_text("".join(line(i) for i in range(4)))
    load(str(path))
    retried = key_of(2)
    queued = encoded(Message(subject="retried", extra={"Attempts": 1}))
    with connection.cursor() as cursor:
        cursor.execute(raw_sql("UPDATE {table} SET value = %s WHERE {key} = %s"), (queued, retried))
        cursor.execute(raw_sql("DELETE FROM {table} WHERE {key} = %s"), (key_of(3),))
    out = StringIO()
    with pytest.raises(CommandError) as error:
        call_command("deadletter_load", str(path), stdout=out, stderr=StringIO())
    assert out.getvalue() == (
        f"Loaded 1 new row(s) of 4 in {path} (2 already queued, 1 conflicting).\n"
    )
    assert str(error.value) == (
        f"{path}: 1 row(s) not loaded: their key is queued with other content, left as queued "
        f"(line 3 key {retried.hex()})"
    )
    with connection.cursor() as cursor:
        cursor.execute(raw_sql("SELECT value FROM {table} WHERE {key} = %s"), (retried,))
        assert bytes(cursor.fetchone()[0]) == queued
    assert count() == 4
