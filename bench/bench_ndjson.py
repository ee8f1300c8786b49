"""Issue 14: `deadletter_dump` and `deadletter_load` of 1,000,000 messages.

Prints, for a dump of the whole table to a file and for a load of that file
into a fresh database (each in a fresh child process, progress off):
  time and rate   rows a second
  RSS growth      the kernel's high-water mark (VmHWM) over the resident size
                  just before the command ran (goal: < 100 MB for the dump)
and whether dumping the loaded database gives the same file. BENCH_MESSAGES
overrides the 1,000,000.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from _setup import REPO, django_on_fresh_sqlite, raw_connection

MESSAGES = int(os.environ.get("BENCH_MESSAGES", "1000000"))

CHILD = r"""
import json, os, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import django
django.setup()
from django.core.management import call_command
from django.db import connection
connection.ensure_connection()

def kb(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])

before = kb("VmRSS")
Path("/proc/self/clear_refs").write_text("5")
start = time.perf_counter()
with open(os.devnull, "w") as null:
    call_command(*sys.argv[2:], "--no-progress", stdout=null, stderr=null)
elapsed = time.perf_counter() - start
print(json.dumps({"elapsed": elapsed, "growth_kb": kb("VmHWM") - before, "rss_before_kb": before}))
"""


def run(db: Path, *args: str) -> dict[str, float]:
    env = {**os.environ, "DEADLETTER_SQLITE_PATH": str(db), "DJANGO_DEBUG": "0"}
    env.pop("DATABASE_URL", None)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(REPO), *args],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.splitlines()[-1])


def fill(path: Path) -> None:
    from deadletter.wire import codec, keys
    from deadletter.wire.gotime import GoTime
    from deadletter.wire.messages import Message

    base = GoTime.now().unix_ns - 10**12
    values = [
        codec.encode_one(
            Message(
                timestamp=GoTime(base + i),
                queued_at=GoTime(base + i * 7),
                username=f"user{i}",
                subject=f"Webhook delivery {i} failed",
                descriptions=["status 503", "retry later"],
                fields=["a", "b"],
                code=i % 5,
                extra={"Attempts": i % 4, "LastError": "ConnectionError: down"},
            )
        )
        for i in range(100)
    ]
    conn = raw_connection(path)
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO deadletter_queuedmessage (key, value) VALUES (?, ?)",
        ((keys.make_key(f"q{i % 4}", base + i, i), values[i % 100]) for i in range(MESSAGES)),
    )
    conn.execute("COMMIT")
    conn.close()


def digest(path: Path) -> bytes:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.digest()


def main() -> None:
    source = django_on_fresh_sqlite("ndjson-source")
    fill(source)
    workdir = source.parent
    dump1, dump2 = workdir / "first.ndjson", workdir / "second.ndjson"
    d = run(source, "deadletter_dump", "-o", str(dump1))
    target = workdir / "ndjson-target.sqlite3"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)
    env = {**os.environ, "DEADLETTER_SQLITE_PATH": str(target)}
    env.pop("DATABASE_URL", None)
    subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "migrate", "-v", "0"], env=env, check=True
    )
    load = run(target, "deadletter_load", str(dump1))
    again = run(target, "deadletter_load", str(dump1))
    run(target, "deadletter_dump", "-o", str(dump2))
    same = (
        hashlib.sha256(dump1.read_bytes()).digest() == hashlib.sha256(dump2.read_bytes()).digest()
    )
    size = dump1.stat().st_size
    print(f"{MESSAGES:,} messages, dump file {size / 1e6:.0f} MB")
    for name, r in (("dump", d), ("load", load), ("load again", again)):
        print(
            f"{name:11s} {r['elapsed']:7.1f} s  {MESSAGES / r['elapsed']:9,.0f} rows/s  "
            f"RSS growth {r['growth_kb'] / 1024:6.1f} MB"
        )
    print(f"dump -> load -> dump gives the same file: {same}")
    for p in (dump1, dump2):
        p.unlink()


if __name__ == "__main__":
    main()
