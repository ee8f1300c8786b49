"""The spool keeps a park held back on SQLite: each record written to the table
once, by its own process while it lives and by any other once it is gone."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import random
import signal
import sqlite3
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cbor2
import pytest
from django.db import connection

from deadletter.drain import Drainer
from deadletter.queue import fetch_failed_msgs, store_failed_msgs
from deadletter.store import spool
from deadletter.wire import codec, keys
from deadletter.wire.messages import Message
from tests.factories import REPO, not_allowed_here


@pytest.fixture
def folder(transactional_db: None) -> Iterator[Path]:
    if connection.vendor != "sqlite":
        pytest.skip("the spool is SQLite's")
    found = spool.directory(connection)
    assert found is not None
    found.mkdir(exist_ok=True)
    yield found
    for left in found.glob("*"):
        left.unlink()
    found.rmdir()


def record(queue: str, key: bytes, msg: Message) -> bytes:
    return spool.encode_record(queue, key, codec.encode_one(msg))


def stamped(subject: str) -> Message:
    from deadletter.wire.gotime import GoTime

    return Message(subject=subject, queued_at=GoTime.now())


def test_a_dead_processs_file_is_written_and_removed(folder: Path) -> None:
    key = keys.new_key(b"q")
    (folder / "1-1-1.spool").write_bytes(record("q", key, stamped("left")))
    assert spool.recover(connection) == 1
    assert [q.key for q in fetch_failed_msgs("q")] == [key]
    assert list(folder.glob("*.spool")) == []


def test_a_torn_last_record_is_left_out_and_the_whole_ones_kept(folder: Path) -> None:
    whole = keys.new_key(b"q")
    torn = record("q", keys.new_key(b"q"), stamped("torn"))
    (folder / "1-1-1.spool").write_bytes(record("q", whole, stamped("whole")) + torn[:-3])
    assert spool.recover(connection) == 1
    assert [q.msg.subject for q in fetch_failed_msgs("q")] == ["whole"]


def test_a_record_already_in_the_table_is_not_written_twice(folder: Path) -> None:
    msg = stamped("once")
    key = store_failed_msgs("q", msg)
    (folder / "1-1-1.spool").write_bytes(record("q", key, msg))
    spool.recover(connection)
    assert [q.key for q in fetch_failed_msgs("q")] == [key]


def test_a_key_taken_by_another_message_meanwhile_gets_a_fresh_key(folder: Path) -> None:
    key = store_failed_msgs("q", stamped("already there"))
    (folder / "1-1-1.spool").write_bytes(record("q", key, stamped("spooled")))
    spool.recover(connection)
    assert sorted(q.msg.subject for q in fetch_failed_msgs("q")) == ["already there", "spooled"]


def test_a_file_its_live_owner_holds_is_left_to_it(folder: Path) -> None:
    path = folder / "1-1-1.spool"
    path.write_bytes(record("q", keys.new_key(b"q"), stamped("owned")))
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        assert spool.recover(connection) == 0
        assert fetch_failed_msgs("q") == []
    finally:
        os.close(fd)
    assert [q.msg.subject for q in fetch_failed_msgs("q")] == ["owned"]


def test_an_in_memory_database_has_no_spool(transactional_db: None) -> None:
    memory = connection.copy()
    memory.settings_dict = {**connection.settings_dict, "NAME": ":memory:"}
    if memory.vendor != "sqlite":
        pytest.skip("the spool is SQLite's")
    assert spool.directory(memory) is None


# --- what recovery reads -------------------------------------------------------------


def test_a_torn_tail_is_discarded_and_said_so_keeping_the_whole_records_before_it(
    folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    whole = [record("q", keys.new_key(b"q"), stamped(s)) for s in ("one", "two")]
    torn = record("q", keys.new_key(b"q"), stamped("torn"))[:-3]
    (folder / "1-1-1.spool").write_bytes(b"".join(whole) + torn)
    with caplog.at_level(logging.ERROR, logger="deadletter"):
        assert spool.recover(connection) == 2
    assert [q.msg.subject for q in fetch_failed_msgs("q")] == ["one", "two"]
    assert f"discarded offset={len(b''.join(whole))} bytes={len(torn)}" in caplog.text


def test_a_record_whose_checksum_fails_is_not_written(
    folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    damaged = bytearray(record("q", keys.new_key(b"q"), stamped("damaged")))
    damaged[-2] ^= 0x01  # one bit of the value flipped, the CBOR still well formed
    kept = record("q", keys.new_key(b"q"), stamped("kept"))
    (folder / "1-1-1.spool").write_bytes(kept + bytes(damaged))
    with caplog.at_level(logging.ERROR, logger="deadletter"):
        assert spool.recover(connection) == 1
    assert [q.msg.subject for q in fetch_failed_msgs("q")] == ["kept"]
    assert "torn or damaged" in caplog.text


def test_a_spool_file_from_before_records_had_checksums_is_still_read(folder: Path) -> None:
    key = keys.new_key(b"q")
    body = cbor2.dumps(["q", key, codec.encode_one(stamped("older"))])
    (folder / "1-1-1.spool").write_bytes(struct.pack(">I", len(body)) + body)
    assert spool.recover(connection) == 1
    assert [q.key for q in fetch_failed_msgs("q")] == [key]


# --- a real small filesystem -----------------------------------------------------------


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `where` for the block: a disk that really fills."""
    where.mkdir()
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
            capture_output=True,
            text=True,
        )
    except FileNotFoundError:
        not_allowed_here("no mount command to make a small filesystem with")
    if done.returncode != 0:
        not_allowed_here(f"mounting a tmpfs is not allowed here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def fill(filler: Path, leave: int) -> None:
    """Fill the filesystem holding `filler`, then give `leave` bytes of it back."""
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        with contextlib.suppress(OSError):
            while os.write(fd, b"\0" * 4096):
                pass
        os.ftruncate(fd, max(0, os.fstat(fd).st_size - leave))
    finally:
        os.close(fd)


def test_an_append_cut_short_by_a_full_disk_fails_and_leaves_the_file_as_it_was(
    tmp_path: Path,
) -> None:
    with tmpfs(tmp_path / "small", "64k") as small:
        spooled = spool.SpoolFile(small / "db.sqlite3-deadletter-spool")
        spooled.append("q", keys.new_key(b"q"), b"\xa0")
        before = spooled.path.read_bytes()
        fill(small / "filler", leave=6000)
        with pytest.raises(OSError, match="No space left"):
            spooled.append("q", keys.new_key(b"q"), os.urandom(20_000))
        assert spooled.path.read_bytes() == before
        spooled.remove()


FULL_DISK_PARKER = """
import os, sys, time, django
django.setup()
from django.db import connection, transaction
from deadletter import Message, QueueingError, fetch_failed_msgs, store_failed_msgs
from tests.store.test_spool import fill
fetch_failed_msgs("q")  # connected: the database's own files are made
fill(sys.argv[1], int(sys.argv[2]))
with transaction.atomic():
    for n in range(100):
        try:
            key = store_failed_msgs("q", Message(subject=os.urandom(2500).hex()))
        except QueueingError as exc:
            print("refused", exc, flush=True)
            break
        print(key.hex(), flush=True)
    time.sleep(60)
"""

FETCH_KEYS = """
import django
django.setup()
from deadletter import fetch_failed_msgs
print(" ".join(q.key.hex() for q in fetch_failed_msgs("q")))
"""


def sqlite_copy(target: Path) -> Path:
    """The test database (migrated, empty) copied to `target`, compacted: after a
    whole suite the test file keeps the free pages of every test before."""
    source = sqlite3.connect(connection.settings_dict["NAME"])
    try:
        source.execute("VACUUM INTO ?", (str(target),))
    finally:
        source.close()
    return target


@pytest.mark.slow
@pytest.mark.parametrize("leave", [12_000, 20_000, 30_000])
def test_on_a_full_disk_a_park_returns_a_key_that_survives_sigkill_or_raises(
    tmp_path: Path, subprocess_env: dict[str, str], leave: int
) -> None:
    if connection.vendor != "sqlite":
        pytest.skip("the spool is SQLite's")
    with tmpfs(tmp_path / "small", "2m") as small:
        env = {**subprocess_env, "DATABASE_URL": f"sqlite:///{sqlite_copy(small / 'db.sqlite3')}"}
        parker = subprocess.Popen(
            [sys.executable, "-c", FULL_DISK_PARKER, str(small / "filler"), str(leave)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert parker.stdout is not None
        returned: list[str] = []
        while (line := parker.stdout.readline()) and not line.startswith("refused"):
            returned.append(line.strip())
        parker.send_signal(signal.SIGKILL)
        _, err = parker.communicate(timeout=30)
        assert line.startswith("refused"), err
        assert "No space left" in line
        assert returned, "the disk was full before the first park"
        (small / "filler").unlink()
        fetched = subprocess.run(
            [sys.executable, "-c", FETCH_KEYS], cwd=REPO, env=env, capture_output=True, text=True
        )
        assert fetched.returncode == 0, fetched.stderr
        assert fetched.stdout.split() == returned


MID_WRITE_APPENDER = """
import sys, django
django.setup()
from pathlib import Path
from deadletter.store import spool
spooled = spool.SpoolFile(Path(sys.argv[1]))
print(spooled.path, flush=True)
big = bytes(16 << 20)  # long enough a copy into the file that a kill often lands in it
for n in range(100):
    spooled.append("q", n.to_bytes(4, "big"), big if n else b"small")
    print(n.to_bytes(4, "big").hex(), flush=True)
"""


@pytest.mark.slow
def test_a_process_killed_mid_append_leaves_its_whole_records_and_a_tear_recovery_names(
    tmp_path: Path, subprocess_env: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    rng = random.Random()
    with tmpfs(tmp_path / "small", "128m") as small:
        for attempt in range(6):
            appender = subprocess.Popen(
                [sys.executable, "-c", MID_WRITE_APPENDER, str(small / f"spool-{attempt}")],
                cwd=REPO,
                env=subprocess_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,  # the full disk that ends an appender not killed
                text=True,
            )
            assert appender.stdout is not None
            path = Path(appender.stdout.readline().strip())
            first = appender.stdout.readline()  # the small record's append returned
            time.sleep(rng.uniform(0, 0.15))
            appender.send_signal(signal.SIGKILL)
            returned = {bytes.fromhex(line) for line in (first + appender.stdout.read()).split()}
            appender.wait(timeout=30)
            data = path.read_bytes()
            caplog.clear()
            with caplog.at_level(logging.ERROR, logger="deadletter"):
                recovered = spool.read_records(data, path)
            kept = sum(len(spool.encode_record(*r)) for r in recovered)
            assert returned <= {key for _, key, _ in recovered}
            assert (kept < len(data)) == (f"discarded offset={kept}" in caplog.text)
            path.unlink()


# --- a file recovery may not remove ---------------------------------------------------------


delivered: list[str] = []


def recording_handler(msg: Message) -> None:
    delivered.append(msg.subject)


@pytest.fixture
def recorded(settings: Any) -> Iterator[list[str]]:
    settings.DEADLETTER_HANDLERS = {"q": "tests.store.test_spool.recording_handler"}
    delivered.clear()
    yield delivered
    delivered.clear()


@contextlib.contextmanager
def immutable(path: Path) -> Iterator[None]:
    """`path` with the immutable attribute, which stops root too from removing it
    (or, for a file, from writing it)."""
    try:
        done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
    except FileNotFoundError:
        not_allowed_here("no chattr to make a file immutable with")
    if done.returncode != 0:
        not_allowed_here(f"this filesystem has no immutable attribute: {done.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


@pytest.mark.slow
def test_a_spool_file_its_folder_will_not_let_go_is_delivered_once_over_several_drains(
    folder: Path, recorded: list[str]
) -> None:
    (folder / "1-1-1.spool").write_bytes(record("q", keys.new_key(b"q"), stamped("once")))
    with immutable(folder):
        for n in range(4):
            store_failed_msgs("q", stamped(f"parked {n}"))
            Drainer(["q"]).run()
        assert recorded.count("once") == 1
        assert len(recorded) == 5
        assert (folder / "1-1-1.spool").read_bytes() == b""


@pytest.mark.slow
def test_a_spool_file_no_one_may_change_is_left_and_said_so_until_it_may(
    folder: Path, recorded: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    path = folder / "1-1-1.spool"
    path.write_bytes(record("q", keys.new_key(b"q"), stamped("later")))
    with caplog.at_level(logging.ERROR, logger="deadletter"), immutable(path):
        for _ in range(3):
            Drainer(["q"]).run()
        assert recorded == []
    assert caplog.text.count("neither remove nor empty") == 1
    Drainer(["q"]).run()
    Drainer(["q"]).run()
    assert recorded == ["later"]
    assert list(folder.iterdir()) == []


RECOVER_AS_ANOTHER = """
import os, sys, django
django.setup()
from deadletter import fetch_failed_msgs
print(os.access(sys.argv[1], os.W_OK), " ".join(q.key.hex() for q in fetch_failed_msgs("q")))
"""


@pytest.mark.slow
def test_a_spool_file_another_user_owns_is_written_once_by_a_process_that_may_remove_it(
    folder: Path, subprocess_env: dict[str, str]
) -> None:
    key = keys.new_key(b"q")
    path = folder / "1-1-1.spool"
    path.write_bytes(record("q", key, stamped("theirs")))
    os.chown(path, 65534, 65534)  # nobody's, read-only: root in a user namespace may not write it
    path.chmod(0o444)
    try:
        done = subprocess.run(
            ["unshare", "--user", "--map-root-user", sys.executable, "-c", RECOVER_AS_ANOTHER]
            + [str(path)],
            cwd=REPO,
            env=subprocess_env,
            capture_output=True,
            text=True,
        )
    except FileNotFoundError:
        not_allowed_here("no unshare to run a process that may not write another user's file")
    if done.returncode != 0 and done.stderr.startswith("unshare:"):
        not_allowed_here(f"user namespaces are not allowed here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", key.hex()]
    assert list(folder.iterdir()) == []


# --- many parkers at once --------------------------------------------------------------------


PARKER = """
import sys, django
django.setup()
from pathlib import Path
from deadletter.store import spool
folder, times = Path(sys.argv[1]), int(sys.argv[2])
refused = 0
for n in range(times):
    try:
        spool.SpoolFile(folder).remove()  # a park's spool file made and let go, as fast as can be
    except OSError as exc:
        refused += 1
        print(exc, file=sys.stderr)
print(refused)
"""


@pytest.mark.slow
def test_parkers_racing_on_the_spool_folder_never_trip_over_it(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    if connection.vendor != "sqlite":
        pytest.skip("the spool is SQLite's")
    with tmpfs(tmp_path / "spool", "16m") as where:  # fsync costs nothing here: more races
        parkers = [
            subprocess.Popen(
                [sys.executable, "-c", PARKER, str(where / "db.sqlite3-deadletter-spool"), "15000"],
                cwd=REPO,
                env=subprocess_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)  # two race hardest: the folder is empty most often
        ]
        results = [parker.communicate(timeout=120) for parker in parkers]
    assert [(out.strip(), err) for out, err in results] == [("0", "")] * 2
