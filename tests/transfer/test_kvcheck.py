from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from django.db import connection

from deadletter.models import QueuedMessage
from deadletter.queue import store_failed_msgs
from deadletter.transfer import kvcheck, kvfile
from tests.factories import manage_py
from tests.transfer.test_kvfile import make_kv, msg, row, sha256, sqlite_file

pytestmark = pytest.mark.django_db(transaction=True)

ENDLESS = (
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
    "SELECT CAST(i AS BLOB), CAST(i AS BLOB), NULL FROM n WHERE i < 0"
)


def hostile_view(path: Path) -> Path:
    """The 4 KB file of issue 11: `kv` is a view over an endless recursive query."""
    sqlite_file(path, f"CREATE VIEW kv (key, value, expires_at) AS {ENDLESS}")
    assert path.stat().st_size <= 4096
    return path


# --- import reads only a real kv table ------------------------------------------------


def test_a_kv_view_over_an_endless_query_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = hostile_view(tmp_path / "hostile.sqlite")
    with pytest.raises(kvfile.KvFileError, match="kv is a view, not a table"):
        kvfile.import_kv(path)
    assert not QueuedMessage.objects.exists()


def test_a_virtual_kv_table_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "virtual.sqlite"
    try:
        sqlite_file(path, "CREATE VIRTUAL TABLE kv USING fts5(key, value, expires_at)")
    except sqlite3.OperationalError:
        pytest.skip("this SQLite has no fts5")
    with pytest.raises(kvfile.KvFileError, match="kv is a virtual table"):
        kvfile.import_kv(path)
    assert not QueuedMessage.objects.exists()


def test_a_kv_table_with_a_generated_column_is_refused(tmp_path: Path) -> None:
    path = sqlite_file(
        tmp_path / "generated.sqlite",
        "CREATE TABLE kv (key BLOB PRIMARY KEY, value BLOB, "
        "expires_at INTEGER GENERATED ALWAYS AS (length(value)))",
    )
    with pytest.raises(kvfile.KvFileError, match="computes column expires_at"):
        kvfile.import_kv(path)


def test_a_query_that_runs_too_long_is_stopped_with_a_kv_file_error(tmp_path: Path) -> None:
    conn = sqlite3.connect(":memory:")
    stopped = pytest.raises(kvfile.KvFileError, match="ran longer than 0.2 s and was stopped")
    with stopped, kvcheck.watch_queries(conn, tmp_path / "x.sqlite", seconds=0.2):
        conn.execute(f"SELECT count(*) FROM ({ENDLESS})").fetchall()


def test_many_short_queries_are_never_stopped_however_long_they_take_together() -> None:
    conn = sqlite3.connect(":memory:")
    with kvcheck.watch_queries(conn, Path("x"), seconds=0.05):
        for _ in range(200):
            conn.execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000) "
                "SELECT count(*) FROM n"
            ).fetchall()


@pytest.mark.slow
def test_the_hostile_file_from_the_shell_is_one_line_and_a_non_zero_exit(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    path = hostile_view(tmp_path / "hostile.sqlite")
    result = manage_py("deadletter_import_kv", str(path), env=subprocess_env)
    assert result.returncode != 0
    assert result.stderr.splitlines() == [
        f"CommandError: {path}: kv is a view, not a table (not a database of the Go program)"
    ]
    assert not QueuedMessage.objects.exists()


# --- export writes only the Go program's file ------------------------------------------


@pytest.fixture
def app_database() -> Path:
    if connection.vendor != "sqlite":
        pytest.skip("the queue's database is not an SQLite file here")
    return Path(connection.settings_dict["NAME"])


def sha256_elsewhere(path: Path) -> str:
    """The file's SHA-256 as another process reads it: this process closing a
    descriptor of its own database would drop SQLite's locks on it."""
    done = subprocess.run(["sha256sum", str(path)], capture_output=True, text=True, check=True)
    return done.stdout.split()[0]


CLOSE_IN_A_CHILD = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
conn.close()
"""


@pytest.mark.parametrize(
    "transfer",
    [lambda path: kvfile.import_kv(path), lambda path: kvfile.export_kv(path, force=True)],
    ids=["import", "export"],
)
def test_a_transfer_refused_the_apps_own_database_leaves_this_process_its_locks(
    app_database: Path, tmp_path: Path, transfer: Callable[[Path], object]
) -> None:
    store_failed_msgs("q", msg("one"))
    link = tmp_path / "edb.sqlite"
    link.symlink_to(app_database)
    with pytest.raises(kvfile.KvFileError, match="is this project's own database"):
        transfer(link)
    # Another process that closes the database while this one still holds SQLite's
    # shared lock leaves the WAL and its index: it knows it was not the last.
    subprocess.run([sys.executable, "-c", CLOSE_IN_A_CHILD, str(app_database)], check=True)
    assert Path(f"{app_database}-wal").exists()
    assert Path(f"{app_database}-shm").exists()
    assert QueuedMessage.objects.count() == 1


def test_export_refuses_the_apps_own_database_through_a_symlink(
    app_database: Path, tmp_path: Path
) -> None:
    store_failed_msgs("q", msg("one"))
    link = tmp_path / "edb.sqlite"
    link.symlink_to(app_database)
    before = sha256_elsewhere(app_database)
    with pytest.raises(kvfile.KvFileError, match="is this project's own database"):
        kvfile.export_kv(link, force=True)
    assert sha256_elsewhere(app_database) == before


def test_export_refuses_the_apps_own_database_by_a_relative_path(
    app_database: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store_failed_msgs("q", msg("one"))
    monkeypatch.chdir(app_database.parent)
    relative = Path(".") / ".." / app_database.parent.name / app_database.name
    with pytest.raises(kvfile.KvFileError, match="is this project's own database"):
        kvfile.export_kv(relative)
    tables = connection.introspection.table_names()
    assert "kv" not in tables


def test_export_refuses_a_file_with_another_applications_tables(tmp_path: Path) -> None:
    store_failed_msgs("q", msg("one"))
    target = sqlite_file(tmp_path / "shop.sqlite", "CREATE TABLE orders (id INTEGER)")
    before = sha256(target)
    with pytest.raises(kvfile.KvFileError, match=r"another application \(orders\).*--force"):
        kvfile.export_kv(target)
    assert sha256(target) == before


def test_with_force_export_writes_into_a_file_with_other_tables(tmp_path: Path) -> None:
    key = store_failed_msgs("q", msg("one"))
    target = sqlite_file(tmp_path / "shop.sqlite", "CREATE TABLE orders (id INTEGER)")
    kvfile.export_kv(target, force=True)
    conn = sqlite3.connect(target)
    assert conn.execute("SELECT key FROM kv").fetchall() == [(key,)]
    conn.close()


def test_the_go_programs_own_file_needs_no_force(tmp_path: Path) -> None:
    store_failed_msgs("q", msg("one"))
    target = make_kv(tmp_path / "go.sqlite", [row("q", 1, 1, msg("go"))])
    conn = sqlite3.connect(target)
    conn.execute("ANALYZE")  # sqlite_stat1 is SQLite's, not another application's
    conn.commit()
    conn.close()
    assert kvfile.export_kv(target).total.written == 1
