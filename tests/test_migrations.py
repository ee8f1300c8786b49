from __future__ import annotations

import json
import logging
import random
import time
import tracemalloc
from collections.abc import Iterator

import cbor2
import pytest
import time_machine
from django.core.management import call_command
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder
from hypothesis import example, given, settings
from hypothesis import strategies as st

from deadletter.migrations._0002_frozen import legacy as frozen_legacy
from deadletter.migrations._0002_frozen import rows as frozen_rows
from deadletter.models import QueuedMessage
from deadletter.queue import fetch_failed_msgs, legacy, store_failed_msgs
from deadletter.wire import codec, keys
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message
from tests.factories import FIXTURES, REPO, insert, kill_manage_py, raw_sql, table_rows

pytestmark = pytest.mark.django_db(transaction=True)

TABLE = QueuedMessage._meta.db_table
SPLIT = "0002_split_legacy_blobs"
NOW = "2026-11-29T12:00:00Z"
QUEUED = GoTime.parse("2026-11-29T11:00:00Z")
NEWER_NS = GoTime.parse("2026-11-29T11:30:00Z").unix_ns


@pytest.fixture
def before_split(transactional_db: None) -> Iterator[None]:
    """The database as the release before the split left it; the full schema again afterwards."""
    call_command("migrate", "deadletter", "0001", verbosity=0)
    yield
    call_command("migrate", "deadletter", verbosity=0)


def migrate_forward() -> None:
    call_command("migrate", "deadletter", verbosity=0)


def migrate_back() -> None:
    call_command("migrate", "deadletter", "0001", verbosity=0)


def msg(subject: str, **kw: object) -> Message:
    return Message(subject=subject, queued_at=kw.pop("queued_at", QUEUED), **kw)  # type: ignore[arg-type]


def put_legacy(queue_name: str, messages: list[Message]) -> None:
    insert(queue_name.encode(), codec.encode(messages))


def rows(queue_name: str | None = None) -> list[tuple[bytes, bytes]]:
    """Every row (of one queue), in key order: the order fetch reads. Rows are written
    and read in raw SQL (`insert`, `table_rows`): the table has the columns of the
    migration state under test, which may be fewer than today's model has."""
    found = table_rows()
    if queue_name is None:
        return found
    return [(k, v) for k, v in found if keys.queue_of(k) == queue_name]


def stored_subjects(queue_name: str) -> list[str]:
    return [m.subject for _, v in rows(queue_name) for m in codec.decode(v)]


def is_applied(name: str) -> bool:
    return ("deadletter", name) in MigrationRecorder(connection).applied_migrations()


# --- forwards ------------------------------------------------------------------


def test_every_legacy_row_becomes_per_message_rows_in_order_ahead_of_the_queues_rows(
    before_split: None,
) -> None:
    with time_machine.travel(NOW, tick=False):
        store_failed_msgs("a", msg("a newer"))
    put_legacy("a", [msg("a old 1"), msg("a old 2"), msg("a old 3")])
    put_legacy("b", [msg("b old 1"), msg("b old 2")])
    migrate_forward()
    assert stored_subjects("a") == ["a old 1", "a old 2", "a old 3", "a newer"]
    assert stored_subjects("b") == ["b old 1", "b old 2"]
    assert [len(codec.decode(v)) for _, v in rows()] == [1] * 6


def test_the_aggregate_row_is_gone_after_the_split(before_split: None) -> None:
    put_legacy("a", [msg("one")])
    migrate_forward()
    assert all(not keys.is_legacy_key(k) for k, _ in rows())


def test_split_messages_keep_their_bytes(before_split: None) -> None:
    originals = [msg("one", fields=["x", ""], skip_recipients=[]), msg("two", extra={"New": 1})]
    put_legacy("a", originals)
    migrate_forward()
    assert [v for _, v in rows("a")] == [codec.encode_one(m) for m in originals]


def go_values() -> list[bytes]:
    """Every value of the go-cbor fixtures the Go program wrote: loose files and rows."""
    manifest = json.loads((FIXTURES / "manifest.json").read_text())
    values = [(FIXTURES / entry["name"]).read_bytes() for entry in manifest["files"]]
    return values + [bytes.fromhex(row["value_hex"]) for row in manifest["rows"]]


def test_the_frozen_split_and_fold_write_the_live_encoders_bytes_for_gos_values(
    before_split: None,
) -> None:
    """Migration 0002 runs its own reduced copy of the codec: held to the live one, both ways."""
    values = [value for value in go_values() if codec.decode(value)]
    for number, value in enumerate(values):
        insert(f"go-{number:02}".encode(), value)
    now = GoTime.parse(NOW)
    now_ns = now.unix_ns
    with time_machine.travel(NOW, tick=False):
        migrate_forward()
    for number, value in enumerate(values):
        stamped = [codec.encode_one(m, stamp_ns=now_ns) for m in codec.decode(value)]
        assert [v for _, v in rows(f"go-{number:02}")] == stamped
    migrate_back()
    try:
        for number, value in enumerate(values):
            stamped_msgs = [m.replace(queued_at=m.queued_at or now) for m in codec.decode(value)]
            folded = codec.encode(stamped_msgs)
            assert rows(f"go-{number:02}") == [(f"go-{number:02}".encode(), folded)]
    finally:
        migrate_forward()


go_times = st.builds(
    GoTime.from_unix_ns,
    st.integers(-62_135_596_800 * 10**9, 253_402_214_400 * 10**9),
    st.integers(-18 * 60, 18 * 60).map(lambda minutes: minutes * 60),
)
plain_text = st.text(max_size=6)
messages = st.builds(
    Message,
    timestamp=st.none() | go_times,
    queued_at=st.none() | go_times,
    username=plain_text,
    subject=plain_text,
    descriptions=st.none() | st.lists(plain_text, max_size=3),
    fields=st.none() | st.lists(plain_text, max_size=3),
    skip_recipients=st.none() | st.lists(plain_text, max_size=3),
    code=st.integers(-(2**63), 2**63 - 1),
    extra=st.dictionaries(
        st.sampled_from(["Later", "Retries", "Ünknown"]), st.integers() | plain_text, max_size=2
    ),
)


time_forms = st.one_of(
    go_times.map(lambda t: t.format()),
    go_times.map(lambda t: cbor2.CBORTag(0, t.format())),
    st.integers(-(10**10), 10**10),
    st.floats(-1e10, 1e10) | st.floats(),
    st.builds(cbor2.CBORTag, st.just(1), st.integers(-(10**10), 10**10)),
    st.sampled_from(
        ["2026-11-29T11:00:00.000Z", "2026-11-29T11:00:00+00:00", "2026-02-30T00:00:00Z"]
    ),
    st.none() | st.just(cbor2.undefined) | st.integers() | plain_text,
)
field_forms = {
    "Timestamp": time_forms,
    "QueuedAt": time_forms,
    "Username": plain_text | st.none() | st.integers(),
    "Subject": plain_text | st.just(cbor2.undefined),
    "Descriptions": st.none() | st.lists(plain_text | st.none(), max_size=2) | plain_text,
    "Fields": st.none() | st.lists(plain_text, max_size=2),
    "SkipRecipients": st.none() | st.lists(plain_text, max_size=2),
    "Code": st.integers(-(2**64), 2**64) | st.none() | st.booleans(),
}


ODD_NAMES = {"subject": "Subject", "QUEUEDAT": "QueuedAt", "Later": "Code"}


@st.composite
def go_maps(draw: st.DrawFn) -> dict[str, object]:
    """A map as some writer may have put it in an aggregate: Go's or not quite (keys
    in another case or order, times as tags or epochs, values of the wrong type)."""
    item: dict[str, object] = {}
    for name in draw(st.lists(st.sampled_from([*field_forms, *ODD_NAMES]))):
        item[name] = draw(field_forms[ODD_NAMES.get(name, name)])
    return item


@settings(max_examples=300 * settings.default.max_examples // 100, deadline=None)
@given(
    st.lists(messages, max_size=3).map(codec.encode)
    | st.lists(go_maps(), max_size=3).map(cbor2.dumps)
    | st.lists(messages, max_size=3).map(
        lambda msgs: b"\x9f" + b"".join(codec.encode_one(m)[1:] for m in msgs) + b"\xff"
    )
)
@example(b"\x81\xa3hQueuedAtt1970-01-01T00:00:00ZhUsername`hQUEUEDATx\x191970-01-01T00:01:00+00:01")
def test_the_frozen_rows_are_the_live_encoders_for_any_aggregate(value: bytes) -> None:
    """What the migration writes for a message is what the live code writes once it has
    read it (and stamped it, when it has no `QueuedAt`); a message one refuses, both do."""
    now_ns = NEWER_NS
    try:
        live = [codec.encode_one(m, stamp_ns=now_ns) for m in codec.iter_decode(value)]
    except codec.CodecError:
        with pytest.raises(ValueError):
            [frozen_rows.row_value(w, now_ns) for w in frozen_rows.message_maps(value)]
        return
    assert frozen_rows.count_messages(value) == len(live)
    assert [frozen_rows.row_value(w, now_ns) for w in frozen_rows.message_maps(value)] == live


def test_the_migration_drops_nothing_for_age(before_split: None) -> None:
    put_legacy("a", [msg("ancient", queued_at=GoTime.parse("2020-01-01T00:00:00Z"))])
    migrate_forward()
    assert stored_subjects("a") == ["ancient"]


def test_a_corrupt_aggregate_is_left_for_fetch_and_the_others_split(
    before_split: None, caplog: pytest.LogCaptureFixture
) -> None:
    insert(b"broken", b"\x83\xa1")
    put_legacy("fine", [msg("one")])
    with caplog.at_level(logging.ERROR, logger="deadletter"):
        migrate_forward()
    assert "legacy row left unsplit queue=broken" in caplog.text
    assert [k for k, _ in rows("broken")] == [b"broken"]
    assert stored_subjects("fine") == ["one"]
    assert is_applied(SPLIT)


def test_migration_and_fetch_read_the_split_queue_alike(before_split: None) -> None:
    put_legacy("a", [msg("one"), msg("two")])
    migrate_forward()
    with time_machine.travel(NOW, tick=False):
        fetched = fetch_failed_msgs("a")
    assert [(q.key, codec.encode_one(q.msg)) for q in fetched] == rows("a")


def test_the_split_holds_one_message_at_a_time_not_the_whole_aggregate(
    before_split: None,
) -> None:
    messages = [msg(f"message {i}", fields=["x" * 20, str(i)]) for i in range(20_000)]
    blob = codec.encode(messages)
    del messages
    insert(b"big", blob)
    tracemalloc.start()
    try:
        split, stored = legacy.split_legacy_rows(connection, TABLE)  # what the migration runs
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (split, stored) == (1, 20_000)
    # The blob read back, plus a batch of rows: 20,000 decoded messages held
    # at once would be several times the blob.
    assert peak < 2 * len(blob)


# --- backwards -----------------------------------------------------------------


def test_downgrade_folds_each_queue_into_one_aggregate_in_key_order(transactional_db: None) -> None:
    with time_machine.travel(NOW, tick=True):
        for name in ("first", "second", "third"):
            store_failed_msgs("a", msg(name))
        store_failed_msgs("b", msg("only"))
    insert(keys.make_key("a", NEWER_NS * 2, 1), codec.encode([msg("x"), msg("y")]))
    migrate_back()
    try:
        assert [k for k, _ in rows()] == [b"a", b"b"]
        (aggregate,) = (v for _, v in rows("a"))
        assert [m.subject for m in codec.decode(aggregate)] == [
            "first",
            "second",
            "third",
            "x",
            "y",
        ]
    finally:
        migrate_forward()


def test_the_folded_aggregate_holds_each_message_byte_for_byte(transactional_db: None) -> None:
    originals = [msg("one", descriptions=[], fields=None), msg("two", extra={"Later": [1, 2]})]
    with time_machine.travel(NOW, tick=True):
        for m in originals:
            store_failed_msgs("a", m)
    migrate_back()
    try:
        assert rows() == [(b"a", codec.encode(originals))]
    finally:
        migrate_forward()


def test_a_downgrade_then_upgrade_loses_nothing(transactional_db: None) -> None:
    with time_machine.travel(NOW, tick=True):
        for i in range(5):
            store_failed_msgs("a", msg(f"a{i}"))
        store_failed_msgs("b", msg("b0"))
        before = {q: [x.msg for x in fetch_failed_msgs(q)] for q in ("a", "b")}
        migrate_back()
        migrate_forward()
        after = {q: [x.msg for x in fetch_failed_msgs(q)] for q in ("a", "b")}
    assert after == before


def test_a_downgrade_leaves_a_corrupt_row_in_place_rather_than_fold_it(
    transactional_db: None,
) -> None:
    bad = keys.make_key("a", NEWER_NS, 1)
    insert(bad, b"corrupted cbor data")
    with time_machine.travel(NOW, tick=False):
        store_failed_msgs("a", msg("fine"))
    migrate_back()
    try:
        assert [k for k, _ in rows()] == [b"a", bad]
        assert [m.subject for m in codec.decode(rows()[0][1])] == ["fine"]
    finally:
        migrate_forward()


# --- crash safety ----------------------------------------------------------------

CRASH_QUEUES = [f"crash-{i}" for i in range(6)]
CRASH_LEGACY = 2500  # three batches of the split
CRASH_NEWER = 3
CRASH_RUNS = 20


def crash_fixture() -> tuple[list[tuple[bytes, bytes]], dict[str, list[str]]]:
    """The rows a pre-split database holds, and what each queue must read afterwards."""
    fixture: list[tuple[bytes, bytes]] = []
    expected: dict[str, list[str]] = {}
    for name in CRASH_QUEUES:
        legacy = [msg(f"{name} legacy {i:05}") for i in range(CRASH_LEGACY)]
        newer = [msg(f"{name} newer {i}") for i in range(CRASH_NEWER)]
        fixture.append((name.encode(), codec.encode(legacy)))
        fixture += [
            (keys.make_key(name, NEWER_NS + i, 1), codec.encode_one(m)) for i, m in enumerate(newer)
        ]
        expected[name] = [m.subject for m in legacy + newer]
    return fixture, expected


def server_sessions() -> set[int]:
    """The sessions on this test database's server but this connection's (none on SQLite)."""
    if connection.vendor == "sqlite":
        return set()  # nothing outlives the process
    if connection.vendor == "mysql":
        sessions_sql = (
            "SELECT ID FROM information_schema.PROCESSLIST "
            "WHERE DB = DATABASE() AND ID <> CONNECTION_ID()"
        )
    else:
        sessions_sql = (
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
    with connection.cursor() as cursor:
        cursor.execute(sessions_sql)
        return {session for (session,) in cursor.fetchall()}


def wait_until_the_killed_client_is_gone_from_the_server(before: set[int]) -> None:
    """On a database server a killed client's session lives on until the server reads the
    end of the connection, and first finishes the statement in flight, which may be a commit
    (of a later migration, say): wait until no session but those of `before` (this
    process's other connections, an earlier test's idle ones) is left."""
    deadline = time.monotonic() + 30
    while left := server_sessions() - before:
        assert time.monotonic() < deadline, f"the killed client's sessions {left} still there"
        time.sleep(0.01)


def split_so_far(name: str, fixture: list[tuple[bytes, bytes]], subjects: list[str]) -> int | None:
    """How many of its legacy messages a killed migration had stored beside a queue's
    aggregate; None once the aggregate is gone (the queue then holds every message once).

    What `split_legacy_row` can leave, each batch and the aggregate's delete being a
    transaction of its own: the aggregate and the queue's own rows unchanged, and
    between them the rows of the batches committed so far: a leading part of the
    messages, in order, each once, a whole number of batches long; or all of them,
    when the kill came between the last batch and the aggregate's delete.
    """
    found = rows(name)
    if found[0][0] != name.encode():
        assert stored_subjects(name) == subjects, f"{name}: aggregate gone, split incomplete"
        return None
    own = [(k, v) for k, v in fixture if keys.queue_of(k) == name]
    assert found[0] == own[0], f"{name}: aggregate changed"
    assert found[-CRASH_NEWER:] == own[1:], f"{name}: the queue's own rows changed"
    split = [m.subject for _, v in found[1:-CRASH_NEWER] for m in codec.decode(v)]
    assert split == subjects[: len(split)], f"{name}: split rows out of order or twice"
    whole_batches = len(split) % frozen_legacy._SPLIT_BATCH == 0
    assert whole_batches or len(split) == CRASH_LEGACY, f"{name}: part of a batch: {len(split)}"
    return len(split)


def assert_split_in_turn(
    fixture: list[tuple[bytes, bytes]], expected: dict[str, list[str]], logged: int
) -> tuple[int, int]:
    """After a kill: the migration splits the queues one by one in key order, so the
    first few are fully split, the next may hold its aggregate beside the batches
    stored so far (none, some or all), and the rest are untouched; the `logged`
    queues whose split the migration reported are among the first. Returns (queues
    fully split, messages stored beside the next one's aggregate)."""
    states = [split_so_far(name, fixture, expected[name]) for name in sorted(expected)]
    done = next((i for i, state in enumerate(states) if state is not None), len(states))
    assert done >= logged, f"a split reported finished left its aggregate: {states}"
    rest = states[done:]
    assert all(state == 0 for state in rest[1:]), f"queues split out of turn: {states}"
    return done, (rest[0] or 0) if rest else 0


@pytest.mark.parametrize("upto", [1_000, CRASH_LEGACY], ids=["some batches", "every batch"])
def test_a_rerun_completes_what_a_killed_split_left_storing_nothing_twice(
    before_split: None, upto: int
) -> None:
    """The two states a kill inside a queue's split leaves, built as the split's key
    rule writes them: the aggregate beside some batches, or beside all of them (killed
    between the last batch and the aggregate's delete, the state a timed kill rarely
    hits)."""
    legacy_msgs = [msg(f"legacy {i:05}") for i in range(CRASH_LEGACY)]
    blob = codec.encode(legacy_msgs)
    insert(b"a", blob)
    insert(keys.make_key("a", NEWER_NS, 1), codec.encode_one(msg("newer")))
    seq = frozen_legacy.split_seq(b"a", blob)
    for i, m in enumerate(legacy_msgs[:upto]):
        insert(keys.make_key("a", NEWER_NS - CRASH_LEGACY + i, seq ^ i), codec.encode_one(m))
    earlier = rows("a")[1 : upto + 1]

    migrate_forward()

    assert stored_subjects("a") == [m.subject for m in legacy_msgs] + ["newer"]
    assert rows("a")[:upto] == earlier


@pytest.mark.slow
@pytest.mark.loops
def test_a_migration_killed_at_random_points_then_rerun_keeps_every_message_once_in_order(
    before_split: None, subprocess_env: dict[str, str]
) -> None:
    fixture, expected = crash_fixture()
    seed = random.randrange(1 << 32)
    rng = random.Random(seed)
    print(f"seed={seed}")  # shown with a failure
    outcomes: list[tuple[int, int]] = []
    for _run in range(CRASH_RUNS):
        migrate_back()  # the migrations after the split, too, are unapplied for real
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {TABLE}")
            cursor.executemany(
                raw_sql("INSERT INTO {table} ({key}, value) VALUES (%s, %s)"), fixture
            )
        # Let a random number of queues finish, then kill at a random moment of
        # the split, the migration this test is about. A kill inside a later
        # migration is Django's to document, not a rerun's to mend: a schema change
        # on MySQL/MariaDB commits on its own, and on PostgreSQL Django records a
        # migration with deferred SQL (an index) only after its transaction has
        # committed, so a kill in between leaves its table made but unrecorded.
        args = ["migrate", "deadletter", "0002_split_legacy_blobs", "--no-input"]
        wait_for = rng.randrange(len(CRASH_QUEUES) + 1)
        before = server_sessions()
        finished = kill_manage_py(args, subprocess_env, "split legacy row", wait_for, rng)
        wait_until_the_killed_client_is_gone_from_the_server(before)
        outcomes.append(assert_split_in_turn(fixture, expected, finished))

        migrate_forward()

        assert is_applied(SPLIT)
        assert not any(keys.is_legacy_key(k) for k, _ in rows()), f"seed={seed}"
        for name, subjects in expected.items():
            assert stored_subjects(name) == subjects, f"seed={seed} queue={name}"
    print(f"(queues split, messages stored beside the next aggregate) at each kill: {outcomes}")


def test_migration_0002_runs_only_its_frozen_code_never_the_live_modules() -> None:
    import ast

    migrations = REPO / "deadletter" / "migrations"
    files = [migrations / "0002_split_legacy_blobs.py", *(migrations / "_0002_frozen").glob("*.py")]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                if name.startswith("deadletter"):
                    assert name.startswith("deadletter.migrations._0002_frozen"), (path.name, name)
