"""Shared set-up for the benchmarks: a fresh database (a SQLite file, or a
PostgreSQL or MySQL/MariaDB database when `DATABASE_URL` names one), migrated,
Django ready."""

from __future__ import annotations

import importlib
import os
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def django_on_fresh_sqlite(name: str) -> Path:
    """Point the demo settings at a new SQLite file, set Django up, migrate it."""
    path = fresh_sqlite_path(name)
    os.environ.pop("DATABASE_URL", None)
    os.environ["DEADLETTER_SQLITE_PATH"] = str(path)
    _django_up()
    return path


def fresh_sqlite_path(name: str) -> Path:
    """A SQLite file `<name>.sqlite3` in BENCH_DIR (a new folder when unset), none of it left."""
    if not os.environ.get("BENCH_DIR"):
        os.environ["BENCH_DIR"] = tempfile.mkdtemp(prefix="deadletter-bench-")
    workdir = Path(os.environ["BENCH_DIR"])
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"{name}.sqlite3"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return path


def timed_get(
    client: Any, url: str, repeat: int, counted: Any
) -> tuple[float, float, int, list[str]]:
    """One admin page through Django's test client: the best of `repeat` requests'
    wall clock and process CPU, the statements of one more, and those of them that
    `counted(sql)` picks (the page's whole-table counts, which a page must not run)."""
    import time

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    assert client.get(url).status_code == 200, url
    best = cpu = float("inf")
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        response = client.get(url)
        best = min(best, time.perf_counter() - start)
        cpu = min(cpu, time.process_time() - start_cpu)
        assert response.status_code == 200
    with CaptureQueriesContext(connection) as ctx:
        client.get(url)
    counts = [q["sql"] for q in ctx.captured_queries if counted(q["sql"])]
    return best, cpu, len(ctx.captured_queries), counts


def is_postgres_url(url: str | None) -> bool:
    return bool(url) and str(url).startswith(("postgres://", "postgresql://"))


def django_on_fresh_postgres(name: str, url: str) -> str:
    """A new database `<url's database>_<name>` on `url`'s server (dropped first
    when a previous run left it), set as `DATABASE_URL`, Django set up, migrated.

    A database of its own per script, so that a run never empties the database
    named by `url` nor one another script is using. Returns its URL.
    """
    fresh_url = fresh_postgres(name, url)
    os.environ["DATABASE_URL"] = fresh_url
    _django_up()
    return fresh_url


def fresh_postgres(name: str, url: str) -> str:
    """`django_on_fresh_postgres`'s database, made (dropped first) and not used yet."""
    import psycopg
    from dj_database_url import parse

    fresh = fresh_name(parse(url)["NAME"], name)
    with psycopg.connect(autocommit=True, connect_timeout=5, **postgres_conninfo(url)) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{fresh}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{fresh}"')
    return url.split("?", 1)[0].rsplit("/", 1)[0] + "/" + fresh


def fresh_name(database: str, name: str) -> str:
    """`<database>_<name>`, with BENCH_DB_SUFFIX after it when set: two runs of one
    script on one server at once, each on a database of its own (a run drops
    its database first, and would end the other's sessions)."""
    return f"{database}_{name}{os.environ.get('BENCH_DB_SUFFIX', '')}"


def is_mysql_url(url: str | None) -> bool:
    return bool(url) and str(url).startswith("mysql://")


def django_on_fresh_mysql(name: str, url: str) -> str:
    """A new database `<url's database>_<name>` (utf8mb4) on `url`'s MySQL/MariaDB
    server, dropped first when a previous run left it, set as `DATABASE_URL`,
    Django set up, migrated; as `django_on_fresh_postgres`. Returns its URL."""
    fresh_url = fresh_mysql(name, url)
    os.environ["DATABASE_URL"] = fresh_url
    _django_up()
    return fresh_url


def fresh_mysql(name: str, url: str) -> str:
    """`django_on_fresh_mysql`'s database, made (dropped first) and not used yet."""
    from dj_database_url import parse

    fresh = fresh_name(parse(url)["NAME"], name)
    admin = raw_mysql_connection(url, database=None)
    try:
        cursor = admin.cursor()
        cursor.execute(f"DROP DATABASE IF EXISTS `{fresh}`")
        cursor.execute(f"CREATE DATABASE `{fresh}` CHARACTER SET utf8mb4")
    finally:
        admin.close()
    return url.split("?", 1)[0].rsplit("/", 1)[0] + "/" + fresh


def django_on_fresh_database(name: str) -> tuple[str, str]:
    """PostgreSQL or MySQL/MariaDB when `DATABASE_URL` names it, else a SQLite file.

    Returns `(vendor, target)`: ("sqlite", the file's path), or ("postgresql" or
    "mysql", the fresh database's URL).
    """
    url = os.environ.get("DATABASE_URL")
    if is_postgres_url(url):
        return "postgresql", django_on_fresh_postgres(name, str(url))
    if is_mysql_url(url):
        return "mysql", django_on_fresh_mysql(name, str(url))
    return "sqlite", str(django_on_fresh_sqlite(name))


APART = "deadletter"
"""The alias of a site that keeps its dead letters apart (`DEADLETTER_DATABASE`)."""


def django_on_fresh_databases(name: str) -> tuple[str, str, str]:
    """`django_on_fresh_database`, and beside it a second fresh database of the same
    vendor (`<name>_apart`) under the alias `APART`, migrated too: the shape of a
    site whose queue lives on an alias of its own. Returns `(vendor, target, apart's)`."""
    url = os.environ.get("DATABASE_URL")
    if is_postgres_url(url) or is_mysql_url(url):
        postgres = is_postgres_url(url)
        fresh = fresh_postgres if postgres else fresh_mysql
        target, apart = fresh(name, str(url)), fresh(f"{name}_apart", str(url))
        os.environ["DATABASE_URL"] = target
        _django_up(apart={"NAME": apart.rsplit("/", 1)[1]})
        return ("postgresql" if postgres else "mysql"), target, apart
    path, apart_path = fresh_sqlite_path(name), fresh_sqlite_path(f"{name}-apart")
    os.environ.pop("DATABASE_URL", None)
    os.environ["DEADLETTER_SQLITE_PATH"] = str(path)
    _django_up(apart={"NAME": str(apart_path)})
    return "sqlite", str(path), str(apart_path)


def _django_up(apart: dict[str, str] | None = None) -> None:
    """Django set up on the demo settings and migrated; with `apart`, an alias `APART`
    like the default one but for these keys (its own database), migrated as well."""
    os.environ["DJANGO_DEBUG"] = "0"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    sys.path.insert(0, str(REPO))
    import django
    from django.conf import settings

    if apart is not None:
        default = settings.DATABASES["default"]
        test = {**default.get("TEST", {}), "NAME": f"{apart['NAME']}_test"}
        settings.DATABASES[APART] = {**default, **apart, "TEST": test}
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    if apart is not None:
        call_command("migrate", database=APART, verbosity=0)


def postgres_conninfo(url: str, dbname: str = "postgres") -> dict[str, Any]:
    """psycopg.connect() keywords for `url`'s server and user, on database `dbname`."""
    from dj_database_url import parse

    cfg = parse(url)
    return {
        "host": cfg["HOST"] or "127.0.0.1",
        "port": cfg["PORT"] or 5432,
        "user": cfg["USER"] or "postgres",
        "password": cfg["PASSWORD"] or None,
        "dbname": dbname,
    }


def raw_connection(path: Path | str) -> sqlite3.Connection:
    """Raw sqlite3 with the same pragmas the app's settings use, in autocommit."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA mmap_size=268435456")
    return conn


def raw_postgres_connection(url: str, *, as_django: bool = False) -> Any:
    """Raw psycopg on `url`'s database in autocommit, the driver's defaults otherwise
    (server-side binding, a statement prepared after 5 runs); with `as_django`, as
    Django's connection has it by default: client-side binding, nothing prepared."""
    import psycopg
    from dj_database_url import parse

    info = postgres_conninfo(url, parse(url)["NAME"])
    if as_django:
        info.update(cursor_factory=psycopg.ClientCursor, prepare_threshold=None)
    return psycopg.connect(autocommit=True, **info)


def mysql_conninfo(url: str, database: str | None = "") -> dict[str, Any]:
    """MySQLdb.connect() keywords for `url`'s server and user, charset utf8mb4 as
    the app's settings ask; on `url`'s database, on `database` when given, on
    none when `database` is None."""
    from dj_database_url import parse

    cfg = parse(url)
    info: dict[str, Any] = {
        "host": cfg["HOST"] or "127.0.0.1",
        "port": int(cfg["PORT"] or 3306),
        "user": cfg["USER"] or "root",
        "password": cfg["PASSWORD"] or "",
        "charset": "utf8mb4",
        "connect_timeout": 5,
    }
    if database is not None:
        info["database"] = database or cfg["NAME"]
    return info


def raw_mysql_connection(url: str, database: str | None = "") -> Any:
    """Raw MySQLdb (mysqlclient) on `url`'s database in autocommit, utf8mb4, the
    driver's defaults otherwise (client-side binding, as Django's backend)."""
    import MySQLdb

    return MySQLdb.connect(autocommit=True, **mysql_conninfo(url, database))


def rss_bytes() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def anon_rss_bytes() -> int:
    """Resident memory of the process's own (anonymous) pages: unlike `rss_bytes`,
    without the file pages SQLite's mmap maps in, which are the page cache's."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return rss_bytes()


def commit_without_flush(target: str, alias: str = "default") -> None:
    """PostgreSQL commits that do not wait for the disk flush on the bench
    database `target` (Django's `alias`), as SQLite's WAL with synchronous=NORMAL:
    on a shared disk the flush's noise would swamp the per-statement cost the
    ratios are about. Both sides get it (a database setting); Django's connection
    reconnects."""
    from django.db import connections

    connection = connections[alias]
    with raw_postgres_connection(target) as admin:
        admin.execute(
            f"ALTER DATABASE {connection.ops.quote_name(connection.settings_dict['NAME'])} "
            "SET synchronous_commit = off"
        )
    connection.close()


def require_speedups() -> None:
    """Exit when the C speed-up is not built: the figures are about it."""
    try:
        importlib.import_module("deadletter.wire._speedups")
    except ImportError:
        sys.exit("the C speed-up is not built: run ./dev (or pip install -e .) first")
