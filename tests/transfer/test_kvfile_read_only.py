"""A Go program's WAL file imports from a read-only mount, and from a writable folder
without a file written beside it (`kvcheck.read_only_uri`).

The read-only folders are real mounts (a tmpfs remounted read-only, a read-only
bind mount): the tests run as root, which ignores permission bits, so a chmod'ed
folder would not be read-only. Where mounting is not allowed they are skipped.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deadletter.transfer import kvfile
from tests.factories import FIXTURES, not_allowed_here
from tests.transfer.test_kvfile import T0, msg, row, subjects

pytestmark = pytest.mark.django_db(transaction=True)

GO_FILE = "edb-small.sqlite"
GO_ROWS = 6  # the fixture's messages: 3 rows and an aggregate of 3


def go_file_in_wal_mode(folder: Path) -> Path:
    """The Go fixture as the Go program keeps it: switched to WAL, cleanly closed."""
    folder.mkdir(exist_ok=True)
    path = Path(shutil.copy(FIXTURES / GO_FILE, folder / GO_FILE))
    conn = sqlite3.connect(path, isolation_level=None)
    assert conn.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
    conn.close()
    return path


def write_into_the_wal(path: Path, *subjects: str) -> sqlite3.Connection:
    """A connection that committed a row per subject into the `-wal` only (no
    checkpoint), left open as a running Go program leaves it."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA wal_autocheckpoint=0")
    for seq, subject in enumerate(subjects, 1):
        conn.execute(
            "INSERT INTO kv (key, value) VALUES (?, ?)", row("wal", T0, seq, msg(subject))[:2]
        )
    assert Path(f"{path}-wal").stat().st_size > 0
    return conn


def listing(folder: Path) -> list[tuple[str, int]]:
    return sorted((p.name, p.stat().st_size) for p in folder.iterdir())


def run_mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        not_allowed_here(f"mounting is not allowed here: {done.stderr.strip()}")


@pytest.fixture
def read_only_copy(tmp_path: Path) -> Iterator[Any]:
    """`copy(files)`: a read-only tmpfs holding copies of `files`, its folder returned."""
    mount = tmp_path / "read-only"
    mount.mkdir()
    mounted = False

    def copy(files: list[Path]) -> Path:
        nonlocal mounted
        run_mount("-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount))
        mounted = True
        for file in files:
            shutil.copy(file, mount / file.name)
        run_mount("-o", "remount,ro", str(mount))
        return mount

    yield copy
    if mounted:
        subprocess.run(["umount", str(mount)], check=True)


@pytest.fixture
def read_only_view(tmp_path: Path) -> Iterator[Any]:
    """`view(folder)`: a read-only bind mount of `folder`, its path returned."""
    mount = tmp_path / "read-only-view"
    mount.mkdir()
    mounted = False

    def view(folder: Path) -> Path:
        nonlocal mounted
        run_mount("--bind", "-o", "ro", str(folder), str(mount))
        mounted = True
        return mount

    yield view
    if mounted:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_cleanly_closed_wal_file_on_a_read_only_mount_imports(
    tmp_path: Path, read_only_copy: Any
) -> None:
    mount = read_only_copy([go_file_in_wal_mode(tmp_path / "go")])
    before = listing(mount)
    assert kvfile.import_kv(mount / GO_FILE).total.written == GO_ROWS
    assert listing(mount) == before


def test_a_wal_file_in_a_writable_folder_is_imported_with_no_file_written_beside_it(
    tmp_path: Path,
) -> None:
    source = go_file_in_wal_mode(tmp_path / "go")
    before = listing(source.parent)
    assert kvfile.count_kv_rows(source) == 4
    assert kvfile.import_kv(source).total.written == GO_ROWS
    assert listing(source.parent) == before


def test_the_wal_rows_of_a_go_program_that_died_are_imported_from_a_read_only_mount(
    tmp_path: Path, read_only_copy: Any
) -> None:
    source = go_file_in_wal_mode(tmp_path / "go")
    go = write_into_the_wal(source, "in the wal")
    files = [source, Path(f"{source}-wal"), Path(f"{source}-shm")]
    mount = read_only_copy(files)  # what a killed program leaves: all three files
    go.close()
    before = listing(mount)
    assert kvfile.import_kv(mount / GO_FILE).total.written == GO_ROWS + 1
    assert subjects("wal") == ["in the wal"]
    assert listing(mount) == before


GO_PROGRAM = """
import json, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA wal_autocheckpoint=0")
rows = [(bytes.fromhex(key), bytes.fromhex(value)) for key, value in json.loads(sys.argv[2])]
conn.executemany("INSERT INTO kv (key, value) VALUES (?, ?)", rows)
print("committed", flush=True)
sys.stdin.read()
"""


@pytest.mark.slow
def test_a_running_go_programs_wal_rows_are_imported_through_a_read_only_mount(
    tmp_path: Path, read_only_view: Any
) -> None:
    source = go_file_in_wal_mode(tmp_path / "go")
    rows = [row("wal", T0, seq, msg(f"live {seq}"))[:2] for seq in (1, 2)]
    go = subprocess.Popen(
        [
            sys.executable,
            "-c",
            GO_PROGRAM,
            str(source),
            json.dumps([[k.hex(), v.hex()] for k, v in rows]),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert go.stdout is not None and go.stdout.readline() == "committed\n"
        assert Path(f"{source}-wal").stat().st_size > 0  # not checkpointed into the file
        mount = read_only_view(source.parent)
        assert kvfile.import_kv(mount / GO_FILE).total.written == GO_ROWS + 2
    finally:
        go.communicate("")
    assert subjects("wal") == ["live 1", "live 2"]


def test_a_wal_holding_rows_without_its_shm_is_refused_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    source = go_file_in_wal_mode(tmp_path / "go")
    go = write_into_the_wal(source, "in the wal")
    copied = tmp_path / "copied"
    copied.mkdir()
    shutil.copy(source, copied)
    shutil.copy(f"{source}-wal", copied)
    go.close()
    before = listing(copied)
    with pytest.raises(
        kvfile.KvFileError, match=r"-wal holds changes not yet in the file and .*-shm is missing"
    ):
        kvfile.import_kv(copied / GO_FILE)
    assert listing(copied) == before
    assert subjects("telegram-queue") == []


def test_an_empty_wal_without_its_shm_reads_the_file_alone(tmp_path: Path) -> None:
    source = go_file_in_wal_mode(tmp_path / "go")
    Path(f"{source}-wal").touch()
    before = listing(source.parent)
    assert kvfile.import_kv(source).total.written == GO_ROWS
    assert listing(source.parent) == before
