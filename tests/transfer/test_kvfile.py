from __future__ import annotations

import hashlib
import random
import shutil
import sqlite3
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cbor2
import pytest
import time_machine

from deadletter.models import QueuedMessage
from deadletter.queue import fetch_failed_msgs, store_failed_msgs
from deadletter.transfer import kvfile
from deadletter.transfer.kvfile.rows import BATCH
from deadletter.wire import codec, keys
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message
from tests.factories import kill_manage_py, table_rows

pytestmark = pytest.mark.django_db(transaction=True)

NOW = "2026-11-29T12:00:00Z"
QUEUED = GoTime.parse("2026-11-29T11:00:00Z")


def make_kv(path: Path, rows: Sequence[tuple[bytes, bytes | None, int | None]]) -> Path:
    """A kv file as the Go program lays it out, holding `rows`."""
    conn = sqlite3.connect(path)
    for statement in kvfile.KV_SCHEMA:
        conn.execute(statement)
    conn.executemany("INSERT INTO kv (key, value, expires_at) VALUES (?, ?, ?)", rows)
    conn.commit()
    conn.close()
    return path


def kv_rows(path: Path) -> list[tuple[bytes, bytes, int | None]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT key, value, expires_at FROM kv ORDER BY key").fetchall()
    finally:
        conn.close()


def msg(subject: str, **kw: Any) -> Message:
    return Message(subject=subject, queued_at=kw.pop("queued_at", QUEUED), **kw)


def row(queue: str, time_ns: int, seq: int, *messages: Message) -> tuple[bytes, bytes, None]:
    return keys.make_key(queue, time_ns, seq), codec.encode(list(messages)), None


def legacy(queue: str, *messages: Message) -> tuple[bytes, bytes, None]:
    return queue.encode(), codec.encode(list(messages)), None


def subjects(queue: str) -> list[str]:
    with time_machine.travel(NOW, tick=False):
        return [q.msg.subject for q in fetch_failed_msgs(queue)]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


T0 = GoTime.parse("2026-11-28T12:00:00Z").unix_ns


# --- the Go program's own database ------------------------------------------


def test_importing_the_go_fixture_then_fetching_gives_the_manifests_messages_in_order(
    manifest: dict[str, Any], fixtures_dir: Path, tmp_path: Path
) -> None:
    source = Path(shutil.copy(fixtures_dir / manifest["db"]["file"], tmp_path))
    by_id = {r["id"]: r for r in manifest["rows"]}
    with time_machine.travel(manifest["generated_at"], tick=False):
        kvfile.import_kv(source)
        for expect in manifest["expect"]:
            fetched = fetch_failed_msgs(expect["queue"])
            wanted = expect["first_fetch"]["messages"]
            assert [q.msg.subject for q in fetched] == expect["first_fetch"]["subjects"]
            for got, want in zip(fetched, wanted, strict=True):
                row_id, index = want["from"].rstrip("]").split("[")
                source_msg = by_id[row_id]["messages"][int(index)]
                assert got.msg.username == source_msg["Username"]
                assert got.msg.descriptions == source_msg["Descriptions"]
                assert got.msg.fields == source_msg["Fields"]
                assert got.msg.skip_recipients == source_msg["SkipRecipients"]
                assert got.msg.code == source_msg["Code"]
                assert got.msg.timestamp == (
                    GoTime.parse(source_msg["Timestamp"]) if source_msg["Timestamp"] else None
                )
                if want["queued_at"] == "STAMPED":
                    assert got.msg.queued_at == GoTime.parse(manifest["generated_at"])
                else:
                    assert got.msg.queued_at is not None
                    assert got.msg.queued_at.format() == want["queued_at"]


def test_the_go_fixtures_per_message_rows_arrive_with_their_keys_and_bytes(
    manifest: dict[str, Any], fixtures_dir: Path, tmp_path: Path
) -> None:
    source = Path(shutil.copy(fixtures_dir / manifest["db"]["file"], tmp_path))
    kvfile.import_kv(source)
    stored = dict(table_rows())
    for r in manifest["rows"]:
        if r["kind"] == "message_row":
            assert stored[bytes.fromhex(r["key_hex"])].hex() == r["value_hex"]


def test_import_reads_the_go_fixture_in_its_read_only_directory_without_changing_it(
    manifest: dict[str, Any], fixtures_dir: Path
) -> None:
    source = fixtures_dir / manifest["db"]["file"]
    before = sha256(source), source.stat().st_mtime_ns, sorted(fixtures_dir.iterdir())
    report = kvfile.import_kv(source)
    assert report.total.written == 6
    assert (sha256(source), source.stat().st_mtime_ns, sorted(fixtures_dir.iterdir())) == before


def test_the_source_is_opened_read_only(tmp_path: Path) -> None:
    conn = kvfile.open_kv(make_kv(tmp_path / "go.sqlite", []))
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        conn.execute("DELETE FROM kv")
    conn.close()


# --- what is imported ----------------------------------------------------------


def test_per_message_rows_keep_their_keys_and_bytes(tmp_path: Path) -> None:
    rows = [row("q", T0, 1, msg("one")), row("q", T0 + 5, 2, msg("two"))]
    kvfile.import_kv(make_kv(tmp_path / "go.sqlite", rows))
    assert table_rows() == [(k, v) for k, v, _ in rows]


def test_legacy_aggregate_is_split_in_order_ahead_of_the_queues_per_message_rows(
    tmp_path: Path,
) -> None:
    source = make_kv(
        tmp_path / "go.sqlite",
        [legacy("q", msg("old 1"), msg("old 2"), msg("old 3")), row("q", T0, 7, msg("newer"))],
    )
    report = kvfile.import_kv(source)
    assert subjects("q") == ["old 1", "old 2", "old 3", "newer"]
    assert b"q" not in dict(table_rows())
    assert (report.total.rows, report.total.messages, report.total.written) == (2, 4, 4)


def test_a_zero_queued_at_in_a_legacy_aggregate_is_stamped_at_import(tmp_path: Path) -> None:
    source = make_kv(tmp_path / "go.sqlite", [legacy("q", Message(subject="never stamped"))])
    with time_machine.travel(NOW, tick=False):
        kvfile.import_kv(source)
        (fetched,) = fetch_failed_msgs("q")
    assert fetched.msg.queued_at == GoTime.parse(NOW)


def test_de_duplication_rows_are_left_alone(tmp_path: Path) -> None:
    source = make_kv(
        tmp_path / "go.sqlite",
        [
            (b"dedup-mark-1", b"", 1795000000),
            (b"q\x00dedup", b"", 1795000000),
            legacy("q", msg("a")),
        ],
    )
    report = kvfile.import_kv(source)
    assert report.ignored == 2
    assert subjects("q") == ["a"]
    assert [keys.queue_of(k) for k, _ in table_rows()] == ["q"]


def test_corrupt_rows_are_counted_and_skipped_never_imported(tmp_path: Path) -> None:
    source = make_kv(
        tmp_path / "go.sqlite",
        [
            (keys.make_key("q", T0, 1), b"corrupted cbor data", None),
            (keys.make_key("q", T0, 2), codec.encode([msg("fine")]), None),
            (b"q\x00short", codec.encode([msg("bad key")]), None),
            (b"broken", b"\x83\xa1", None),
        ],
    )
    report = kvfile.import_kv(source)
    counts = {c.queue: c for c in report.queues}
    assert (counts["q"].corrupt, counts["q"].written) == (2, 1)
    assert (counts["broken"].corrupt, counts["broken"].written) == (1, 0)
    assert table_rows() == [(keys.make_key("q", T0, 2), codec.encode([msg("fine")]))]


def test_a_multi_message_row_is_imported_as_it_is_and_split_at_fetch(tmp_path: Path) -> None:
    source = make_kv(tmp_path / "go.sqlite", [row("q", T0, 1, msg("a"), msg("b"))])
    report = kvfile.import_kv(source)
    assert (report.total.rows, report.total.messages, report.total.written) == (1, 2, 2)
    assert subjects("q") == ["a", "b"]


def test_only_the_named_queues_are_imported(tmp_path: Path) -> None:
    source = make_kv(
        tmp_path / "go.sqlite",
        [legacy("a", msg("in a")), legacy("b", msg("in b")), row("c", T0, 1, msg("in c"))],
    )
    report = kvfile.import_kv(source, queues=["a", "c"])
    assert [c.queue for c in report.queues] == ["a", "c"]
    assert {keys.queue_of(k) for k, _ in table_rows()} == {"a", "c"}


def test_an_unknown_queue_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    source = make_kv(tmp_path / "go.sqlite", [legacy("a", msg("in a"))])
    with pytest.raises(kvfile.KvFileError, match="no queue named 'nope'"):
        kvfile.import_kv(source, queues=["a", "nope"])
    assert table_rows() == []


def test_a_dry_run_writes_nothing_and_reports_what_an_import_would(tmp_path: Path) -> None:
    source = make_kv(tmp_path / "go.sqlite", [legacy("q", msg("a"), msg("b"))])
    report = kvfile.import_kv(source, dry_run=True)
    assert table_rows() == []
    assert report.dry_run
    assert (report.total.written, report.total.present) == (2, 0)
    assert kvfile.import_kv(source).total.written == 2


# --- importing twice -------------------------------------------------------------


def test_importing_twice_imports_nothing_twice(tmp_path: Path) -> None:
    source = make_kv(
        tmp_path / "go.sqlite",
        [legacy("q", msg("old 1"), Message(subject="old 2")), row("q", T0, 1, msg("new"))],
    )
    kvfile.import_kv(source)
    first = table_rows()
    again = kvfile.import_kv(source)
    assert table_rows() == first
    assert (again.total.written, again.total.present) == (0, 3)


def test_a_legacy_split_gets_the_same_keys_whatever_the_clock(tmp_path: Path) -> None:
    source = make_kv(tmp_path / "go.sqlite", [legacy("q", msg("a"), Message(subject="b"))])
    with time_machine.travel("2026-12-01T00:00:00Z", tick=False):
        kvfile.import_kv(source)
    first = [k for k, _ in table_rows()]
    QueuedMessage.objects.all().delete()
    with time_machine.travel("2027-03-01T00:00:00Z", tick=False):
        kvfile.import_kv(source)
    assert [k for k, _ in table_rows()] == first


def test_reimporting_after_fetch_rewrote_the_rows_duplicates_nothing(tmp_path: Path) -> None:
    source = make_kv(
        tmp_path / "go.sqlite",
        [legacy("q", Message(subject="zero queued_at")), row("q", T0, 1, msg("x"), msg("y"))],
    )
    kvfile.import_kv(source)
    first_fetch = subjects("q")  # stamps, and splits the two-message row
    kvfile.import_kv(source)
    assert subjects("q") == first_fetch == ["zero queued_at", "x", "y"]


def test_messages_already_parked_here_stay_beside_the_imported_ones(tmp_path: Path) -> None:
    with time_machine.travel(NOW, tick=False):
        store_failed_msgs("q", msg("parked here"))
    source = make_kv(tmp_path / "go.sqlite", [row("q", T0, 1, msg("from go"))])
    kvfile.import_kv(source)
    assert subjects("q") == ["from go", "parked here"]


# --- an import killed half way ----------------------------------------------------

KILL_QUEUES = ("kill-a", "kill-b", "kill-c")
KILL_RUNS = 20


def imported_in_turn(clean: list[tuple[bytes, bytes]], logged: int) -> tuple[int, int]:
    """After a kill: the import writes the queues one by one, each in key order in
    batches of `BATCH` rows (one transaction each), so the first queues hold all of
    their rows, the next a whole number of batches of its rows (a leading part, each
    row once, its key and bytes those a complete import writes), the rest nothing;
    the `logged` queues the import reported are among the first. Returns (queues
    complete, rows of the next)."""
    found = table_rows()
    assert all(keys.queue_of(k) in KILL_QUEUES for k, _ in found)
    states: list[int | None] = []  # rows held of an incomplete queue, None when complete
    for name in KILL_QUEUES:
        want = [(k, v) for k, v in clean if keys.queue_of(k) == name]
        mine = [(k, v) for k, v in found if keys.queue_of(k) == name]
        assert mine == want[: len(mine)], f"{name}: rows not a leading part of the import's"
        assert len(mine) % BATCH == 0 or len(mine) == len(want), f"{name}: part of a batch"
        states.append(None if len(mine) == len(want) else len(mine))
    done = next((i for i, state in enumerate(states) if state is not None), len(states))
    assert done >= logged, f"a queue reported imported is incomplete: {states}"
    rest = states[done:]
    assert all(state == 0 for state in rest[1:]), f"queues imported out of turn: {states}"
    return done, (rest[0] or 0) if rest else 0


@pytest.mark.slow
@pytest.mark.loops
def test_an_import_killed_at_random_points_then_rerun_writes_every_row_once(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    fixture = []
    for name in KILL_QUEUES:
        fixture.append(legacy(name, *(msg(f"{name} legacy {i:04}") for i in range(1_200))))
        fixture += [row(name, T0 + i, 1, msg(f"{name} row {i:04}")) for i in range(700)]
    source = make_kv(tmp_path / "go.sqlite", fixture)
    kvfile.import_kv(source)
    clean = table_rows()
    seed = random.randrange(1 << 32)
    rng = random.Random(seed)
    print(f"seed={seed}")  # shown with a failure
    outcomes: list[tuple[int, int]] = []
    for _run in range(KILL_RUNS):
        QueuedMessage.objects.all().delete()
        # A random number of queues imported, then a kill at a random moment.
        args = ["deadletter_import_kv", str(source)]
        wait_for = rng.randrange(len(KILL_QUEUES) + 1)
        logged = kill_manage_py(args, subprocess_env, "imported queue=", wait_for, rng)
        outcomes.append(imported_in_turn(clean, logged))

        kvfile.import_kv(source)

        assert table_rows() == clean
    print(f"(queues imported, rows of the next) at each kill: {outcomes}")


# --- a file that is not what it should be --------------------------------------


def sqlite_file(path: Path, *statements: str) -> Path:
    """An SQLite file made by `statements`: a file that is not the kv file it should be."""
    conn = sqlite3.connect(path)
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()
    return path


def write_other_columns(path: Path) -> Path:
    return sqlite_file(
        path, "CREATE TABLE kv (key BLOB PRIMARY KEY, value BLOB, expires_at INTEGER, x)"
    )


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "missing.sqlite", "no such file"),
        (lambda p: p, "is a directory"),
        (lambda p: (p / "notes.txt").write_text("hello") and p / "notes.txt", "not an SQLite"),
        (lambda p: (p / "empty").write_bytes(b"") or p / "empty", "not an SQLite"),
        (
            lambda p: sqlite_file(p / "other.sqlite", "CREATE TABLE other (id INTEGER)"),
            "no kv table",
        ),
        (lambda p: write_other_columns(p / "wide.sqlite"), "columns (key, value, expires_at, x)"),
    ],
    ids=["missing", "directory", "text file", "empty file", "no kv table", "other columns"],
)
def test_a_bad_source_is_one_clear_error_and_nothing_is_written(
    tmp_path: Path, make: Any, message: str
) -> None:
    path = make(tmp_path)
    with pytest.raises(kvfile.KvFileError) as error:
        kvfile.import_kv(path)
    assert message in str(error.value)
    assert "\n" not in str(error.value)
    assert table_rows() == []


# --- export ----------------------------------------------------------------------


def test_export_creates_the_go_programs_table_and_index(
    manifest: dict[str, Any], tmp_path: Path
) -> None:
    store_failed_msgs("q", msg("a"))
    target = tmp_path / "out.sqlite"
    kvfile.export_kv(target)
    conn = sqlite3.connect(target)
    schema = [
        sql
        for (sql,) in conn.execute(
            "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY rowid"
        )
    ]
    conn.close()
    wanted = [
        s.strip().rstrip(";").replace("IF NOT EXISTS ", "")
        for s in manifest["db"]["schema"].split(";\n")
    ]
    assert schema == wanted


def test_export_writes_one_row_per_message_with_expires_at_null(tmp_path: Path) -> None:
    first = store_failed_msgs("q", msg("a"))
    second = store_failed_msgs("q", msg("b"))
    target = tmp_path / "out.sqlite"
    kvfile.export_kv(target)
    assert kv_rows(target) == [
        (first, codec.encode([msg("a")]), None),
        (second, codec.encode([msg("b")]), None),
    ]


def test_export_then_import_round_trips_every_message_byte_for_byte(
    manifest: dict[str, Any], fixtures_dir: Path, tmp_path: Path
) -> None:
    for r in manifest["rows"]:
        if r["kind"] == "message_row":
            QueuedMessage.objects.create(
                key=bytes.fromhex(r["key_hex"]), value=bytes.fromhex(r["value_hex"])
            )
    for f in manifest["files"]:
        store_failed_msgs("loose", codec.decode((fixtures_dir / f["name"]).read_bytes())[0])
    before = table_rows()
    target = tmp_path / "out.sqlite"
    kvfile.export_kv(target)
    QueuedMessage.objects.all().delete()
    kvfile.import_kv(target)
    assert table_rows() == before


def test_export_splits_a_legacy_row_left_here_into_per_message_rows(tmp_path: Path) -> None:
    QueuedMessage.objects.create(key=b"q", value=codec.encode([msg("a"), msg("b")]))
    target = tmp_path / "out.sqlite"
    kvfile.export_kv(target)
    exported = kv_rows(target)
    assert [codec.decode(v)[0].subject for _, v, _ in exported] == ["a", "b"]
    assert all(not keys.is_legacy_key(k) for k, _, _ in exported)


def test_export_into_the_go_programs_database_keeps_its_rows(tmp_path: Path) -> None:
    existing = [(b"dedup-mark", b"", 1795000000), row("q", T0, 1, msg("already there"))]
    target = make_kv(tmp_path / "go.sqlite", existing)
    key = store_failed_msgs("q", msg("from django"))
    report = kvfile.export_kv(target)
    assert report.ignored == 1
    assert kv_rows(target) == sorted([*existing, (key, codec.encode([msg("from django")]), None)])


def test_exporting_twice_writes_nothing_twice(tmp_path: Path) -> None:
    store_failed_msgs("q", msg("a"))
    target = tmp_path / "out.sqlite"
    kvfile.export_kv(target)
    again = kvfile.export_kv(target)
    assert (again.total.written, again.total.present) == (0, 1)
    assert len(kv_rows(target)) == 1


def test_export_of_only_the_named_queues(tmp_path: Path) -> None:
    store_failed_msgs("a", msg("in a"))
    store_failed_msgs("b", msg("in b"))
    target = tmp_path / "out.sqlite"
    kvfile.export_kv(target, queues=["b"])
    assert [keys.queue_of(k) for k, _, _ in kv_rows(target)] == ["b"]


def test_export_of_an_unknown_queue_is_refused_and_creates_no_file(tmp_path: Path) -> None:
    store_failed_msgs("a", msg("in a"))
    with pytest.raises(kvfile.KvFileError, match="no queue named 'nope'"):
        kvfile.export_kv(tmp_path / "out.sqlite", queues=["nope"])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p, "is a directory"),
        (lambda p: p / "no-such-dir" / "out.sqlite", "is not a directory"),
        (lambda p: (p / "file").write_text("x") and p / "file" / "out.sqlite", "not a directory"),
        (lambda p: (p / "notes.txt").write_text("hello") and p / "notes.txt", "not an SQLite"),
        (lambda p: write_other_columns(p / "wide.sqlite"), "columns (key, value, expires_at, x)"),
    ],
    ids=["directory", "missing parent", "parent is a file", "text file", "other columns"],
)
def test_a_bad_export_path_is_one_clear_error_and_nothing_is_written(
    tmp_path: Path, make: Any, message: str
) -> None:
    store_failed_msgs("q", msg("a"))
    path = make(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(kvfile.KvFileError) as error:
        kvfile.export_kv(path)
    assert message in str(error.value)
    assert "\n" not in str(error.value)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_an_export_path_the_system_will_not_write_is_one_clear_error() -> None:
    unwritable = Path("/sys")  # read-only even for root, unlike a chmod-ed directory
    if not unwritable.is_dir():
        pytest.skip("no /sys on this system")
    store_failed_msgs("q", msg("a"))
    with pytest.raises(kvfile.KvFileError, match="cannot write"):
        kvfile.export_kv(unwritable / "deadletter-export.sqlite")


# --- bounded memory ------------------------------------------------------------


def test_a_big_aggregate_is_imported_without_holding_its_messages_at_once(
    tmp_path: Path,
) -> None:
    messages = [msg(f"message {i}", fields=["x" * 20, str(i)]) for i in range(20_000)]
    blob = codec.encode(messages)
    del messages
    source = make_kv(tmp_path / "go.sqlite", [(b"big", blob, None)])
    tracemalloc.start()
    try:
        report = kvfile.import_kv(source)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.total.written == 20_000
    # The blob itself, read once, plus a batch of rows: 20,000 decoded
    # messages held at once would be several times the blob.
    assert peak < 2 * len(blob)


def test_a_source_in_wal_mode_is_read_while_the_go_program_has_it_open(tmp_path: Path) -> None:
    source = make_kv(tmp_path / "go.sqlite", [row("q", T0, 1, msg("committed"))])
    go = sqlite3.connect(source, isolation_level=None)
    go.execute("PRAGMA journal_mode=WAL")
    go.execute("BEGIN IMMEDIATE")
    go.execute("INSERT INTO kv (key, value) VALUES (?, ?)", row("q", T0, 2, msg("uncommitted"))[:2])
    try:
        report = kvfile.import_kv(source)
    finally:
        go.execute("ROLLBACK")
        go.close()
    assert report.total.written == 1
    assert subjects("q") == ["committed"]


# --- export into a file that still holds a legacy aggregate ----------------------


def go_count(path: Path, queue: str) -> int:
    """How many messages the Go program reads for `queue`: its aggregate's and its rows'."""
    total = 0
    for key, value, expires_at in kv_rows(path):
        if expires_at is None and keys.queue_of(key) == queue:
            total += len(codec.decode(value))
    return total


def go_file_with_an_aggregate(path: Path) -> Path:
    return make_kv(
        path,
        [
            legacy("q", *(msg(f"legacy {i}") for i in range(1_000))),
            *(row("q", T0 + i, 1, msg(f"newer {i}")) for i in range(3)),
            (b"dedup-mark", b"", 1795000000),
        ],
    )


def test_importing_then_exporting_back_leaves_the_go_programs_count_unchanged(
    tmp_path: Path,
) -> None:
    target = go_file_with_an_aggregate(tmp_path / "go.sqlite")
    kvfile.import_kv(target)
    report = kvfile.export_kv(target)
    assert go_count(target, "q") == 1_003
    assert (report.total.written, report.total.present) == (0, 1_003)
    assert report.folded == {"q": 1_000}
    assert all(not keys.is_legacy_key(k) for k, _, e in kv_rows(target) if e is None)
    head = kvfile.format_report(report).splitlines()[0]
    assert head == (
        f"Exported 1000 messages to {target} (1000 of them split out of the file's own "
        "legacy rows); 1003 already in the file with the same bytes, left alone; "
        "1 de-duplication rows left alone"
    )


def test_exporting_beside_a_go_aggregate_adds_only_the_messages_parked_here(
    tmp_path: Path,
) -> None:
    target = go_file_with_an_aggregate(tmp_path / "go.sqlite")
    store_failed_msgs("q", msg("parked here"))
    kvfile.export_kv(target)
    assert go_count(target, "q") == 1_004
    kvfile.import_kv(target)
    assert subjects("q")[:1_000] == [f"legacy {i}" for i in range(1_000)]
    assert len(subjects("q")) == 1_004


def test_the_aggregate_of_a_queue_not_exported_stays_as_it_is(tmp_path: Path) -> None:
    target = go_file_with_an_aggregate(tmp_path / "go.sqlite")
    store_failed_msgs("other", msg("x"))
    kvfile.export_kv(target, queues=["other"])
    assert b"q" in [k for k, _, _ in kv_rows(target)]


def test_a_corrupt_aggregate_in_the_file_refuses_the_export_naming_the_queue(
    tmp_path: Path,
) -> None:
    target = make_kv(tmp_path / "go.sqlite", [(b"q", b"\x83\xa1", None)])
    store_failed_msgs("q", msg("parked here"))
    before = sha256(target)
    with pytest.raises(kvfile.KvFileError, match="legacy row of queue 'q' does not decode"):
        kvfile.export_kv(target)
    assert sha256(target) == before


# --- parking never waits on a long import ---------------------------------------------


@pytest.mark.slow
def test_every_store_succeeds_while_a_large_file_is_imported(tmp_path: Path) -> None:
    from tests.queue.test_legacy import LARGE, parking_continuously

    per_message = [row("q", T0 + i, 1, msg(f"row {i}")) for i in range(LARGE // 2)]
    source = make_kv(
        tmp_path / "go.sqlite",
        [legacy("q", *(msg(f"legacy {i}") for i in range(LARGE))), *per_message],
    )
    with parking_continuously() as parked:
        report = kvfile.import_kv(source)
    assert parked.failed == []
    assert report.total.written == LARGE + LARGE // 2
    assert QueuedMessage.objects.count() == report.total.written + parked.stored


# --- a first failure in the future (the Go program's clock ran ahead) -----------------

FUTURE = GoTime.parse("9999-12-15T00:00:00Z")


def test_a_row_first_failed_in_the_future_is_skipped_and_counted(
    tmp_path: Path,
) -> None:
    ahead = row("q", T0, 2, msg("ahead", queued_at=FUTURE))
    source = make_kv(tmp_path / "go.sqlite", [row("q", T0, 1, msg("fine")), ahead])
    with time_machine.travel(NOW, tick=False):
        report = kvfile.import_kv(source)
    (counts,) = report.queues
    assert (counts.rows, counts.messages, counts.written, counts.future) == (2, 2, 1, 1)
    assert subjects("q") == ["fine"]


def test_a_multi_message_row_with_one_message_in_the_future_is_skipped_whole(
    tmp_path: Path,
) -> None:
    source = make_kv(
        tmp_path / "go.sqlite", [row("q", T0, 1, msg("fine"), msg("ahead", queued_at=FUTURE))]
    )
    report = kvfile.import_kv(source)
    assert (report.total.written, report.total.future) == (0, 2)
    assert table_rows() == []


def test_within_the_clock_skew_a_first_failure_ahead_is_imported(tmp_path: Path) -> None:
    soon = GoTime.parse("2026-11-29T12:04:00Z")
    source = make_kv(tmp_path / "go.sqlite", [row("q", T0, 1, msg("soon", queued_at=soon))])
    with time_machine.travel(NOW, tick=False):
        assert kvfile.import_kv(source).total.future == 0
    assert len(table_rows()) == 1


def test_a_future_message_in_a_legacy_aggregate_leaves_only_its_own_slot_empty(
    tmp_path: Path,
) -> None:
    source = make_kv(
        tmp_path / "go.sqlite",
        [
            legacy("q", msg("a"), msg("ahead", queued_at=FUTURE), msg("c")),
            row("q", T0, 1, msg("newer")),
        ],
    )
    report = kvfile.import_kv(source)
    assert (report.total.messages, report.total.written, report.total.future) == (4, 3, 1)
    assert subjects("q") == ["a", "c", "newer"]
    first = table_rows()
    again = kvfile.import_kv(source)
    assert (again.total.written, again.total.present, again.total.future) == (0, 3, 1)
    assert table_rows() == first


def test_an_aggregate_anchored_on_a_year_9999_time_imports_below_the_last_key_time(
    tmp_path: Path,
) -> None:
    """With no per-message row the split goes below the aggregate's newest time;
    one past the key's 64 bits holds the split at the last key time there is."""
    source = make_kv(
        tmp_path / "go.sqlite",
        [legacy("q", msg("a"), Message(subject="b", timestamp=FUTURE))],
    )
    report = kvfile.import_kv(source)
    assert report.total.written == 2
    assert [keys.parse_key(k).time_ns for k, _ in table_rows()] == [2**64 - 2, 2**64 - 1]
    assert kvfile.import_kv(source).total.present == 2


def test_an_export_carries_a_future_first_failure_as_the_table_holds_it(tmp_path: Path) -> None:
    """Only the way in refuses one: what another writer left here goes back to Go as it is."""
    key, value, _ = row("q", T0, 1, msg("ahead", queued_at=FUTURE))
    QueuedMessage.objects.create(key=key, value=value)
    target = tmp_path / "go.sqlite"
    assert kvfile.export_kv(target).total.written == 1
    assert kv_rows(target) == [(key, value, None)]


# --- export over the Go program's rows ------------------------------------------


def test_export_over_the_go_fixture_replaces_a_row_edited_here(
    manifest: dict[str, Any], fixtures_dir: Path, tmp_path: Path
) -> None:
    target = Path(shutil.copy(fixtures_dir / manifest["db"]["file"], tmp_path))
    with time_machine.travel(manifest["generated_at"], tick=False):
        kvfile.import_kv(target)
    before = {k: v for k, v, _ in kv_rows(target)}
    edited = next(k for k in before if k in dict(table_rows()))
    # What an edit or a drain's write-back does: new bytes under the same key.
    new_msg = codec.decode(before[edited])[0].replace(subject="edited here")
    new_value = codec.encode([new_msg])
    QueuedMessage.objects.filter(key=edited).update(value=new_value)
    with time_machine.travel(manifest["generated_at"], tick=False):
        report = kvfile.export_kv(target)
    after = {k: v for k, v, _ in kv_rows(target)}
    assert after[edited] == new_value
    kept = [k for k in before if k != edited and not keys.is_legacy_key(k)]
    assert kept
    assert {k: after[k] for k in kept} == {k: before[k] for k in kept}
    assert (report.total.written, report.total.replaced) == (0, 1)
    assert report.total.present == report.total.messages - 1
    head = kvfile.format_report(report).splitlines()[0]
    assert "1 of them replaced the file's row under the same key" in head


def test_export_leaves_a_de_duplication_mark_under_a_queue_rows_key_alone(
    tmp_path: Path,
) -> None:
    key = store_failed_msgs("q", msg("here"))
    target = make_kv(tmp_path / "go.sqlite", [(key, b"mark", 1795000000)])
    report = kvfile.export_kv(target)
    assert kv_rows(target) == [(key, b"mark", 1795000000)]
    assert (report.total.replaced, report.total.present) == (0, 1)


def test_export_replaces_every_drain_write_back_in_a_batch(tmp_path: Path) -> None:
    written = [store_failed_msgs("q", msg(f"m{i}")) for i in range(BATCH + 3)]
    target = tmp_path / "out.sqlite"
    kvfile.export_kv(target)
    changed = written[::5]
    for key in changed:
        QueuedMessage.objects.filter(key=key).update(value=codec.encode([msg("retried")]))
    report = kvfile.export_kv(target)
    assert (report.total.written, report.total.replaced) == (0, len(changed))
    assert report.total.present == len(written) - len(changed)
    assert [(k, v) for k, v, _ in kv_rows(target)] == table_rows()


# --- rows only Go's decoder read before ---------------------------------------------


def odd_go_rows() -> list[tuple[bytes, bytes, None]]:
    """Rows Go's decoder reads that cbor2's dict reads otherwise or not at all."""
    plain = codec.encode([msg("odd")])
    assert plain[1] == 0xA8
    queued = cbor2.dumps("QueuedAt") + cbor2.dumps("2026-01-01T00:00:00Z")
    entries = [
        cbor2.dumps(7) + cbor2.dumps("int key"),
        cbor2.dumps("Origin") + b"\x62\xff\xfe",
        cbor2.dumps("queuedat") + cbor2.dumps("2026-01-01T00:00:00Z"),
        queued,
    ]
    values = [b"\x81\xa9" + plain[2:] + extra for extra in entries]
    values.append(b"\x81\xc9" + plain[1:])  # tag 9 around the message
    return [(keys.make_key("q", T0 + i, i), value, None) for i, value in enumerate(values)]


def test_rows_go_reads_are_imported_read_as_go_reads_them_and_exported_unchanged(
    tmp_path: Path,
) -> None:
    rows = odd_go_rows()
    source = make_kv(tmp_path / "go.sqlite", rows)
    report = kvfile.import_kv(source)
    assert (report.total.written, report.total.corrupt) == (len(rows), 0)
    assert table_rows() == [(k, v) for k, v, _ in rows]
    read = [codec.decode(v)[0] for _, v, _ in rows]
    assert {m.queued_at for m in read} == {QUEUED}  # the first QueuedAt, as Go reads it
    assert [len(m.raw_entries) for m in read] == [1, 1, 0, 0, 0]
    target = tmp_path / "back.sqlite"
    kvfile.export_kv(target)
    assert kv_rows(target) == rows
