"""Shared set-up for the benchmarks: a fresh SQLite file, migrated, Django ready."""

from __future__ import annotations

import os
import sqlite3
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def django_on_fresh_sqlite(name: str) -> Path:
    """Point the demo settings at a new SQLite file, set Django up, migrate it."""
    workdir = Path(os.environ.get("BENCH_DIR") or tempfile.mkdtemp(prefix="deadletter-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"{name}.sqlite3"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    os.environ.pop("DATABASE_URL", None)
    os.environ["DJANGO_DEBUG"] = "0"
    os.environ["DEADLETTER_SQLITE_PATH"] = str(path)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    sys.path.insert(0, str(REPO))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return path


def raw_connection(path: Path) -> sqlite3.Connection:
    """Raw sqlite3 with the same pragmas the app's settings use, in autocommit."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def rss_bytes() -> int:
    import psutil

    return psutil.Process().memory_info().rss
