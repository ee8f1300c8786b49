"""transfer.ndjson: a row a line, keys kept, every value in a JSON form, strict loading."""

from __future__ import annotations

import io
import json
import math

import cbor2
import pytest
from django.db import connection

from deadletter import queue
from deadletter.transfer import ndjson
from deadletter.wire import codec, keys
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message
from tests.factories import insert, table_rows

pytestmark = pytest.mark.django_db(transaction=True)


def dumped(queues: list[str] | None = None) -> str:
    out = io.StringIO()
    ndjson.dump(out, queues)
    return out.getvalue()


ODD = Message(
    timestamp=GoTime.parse("2026-03-01T12:00:00.123456789+05:30"),
    queued_at=GoTime.parse("2026-03-01T12:00:01Z"),
    username="ü",
    subject="line\nbreak",
    descriptions=[],
    fields=None,
    skip_recipients=["a"],
    code=2**62,
    extra={
        "Blob": b"\x00\xff",
        "NaN": math.nan,
        "Tagged": cbor2.CBORTag(1234, "x"),
        "Big": 2**70,
        "$odd": [1, {"$k": None}],
    },
)


def test_a_line_holds_the_key_the_queue_and_every_field() -> None:
    key = keys.make_key("mail", 10**18, 7)
    line = json.loads(ndjson.row_line(key, codec.encode_one(ODD)))
    assert line["key"] == key.hex()
    assert line["queue"] == "mail"
    assert line["Timestamp"] == "2026-03-01T12:00:00.123456789+05:30"
    assert line["QueuedAt"] == "2026-03-01T12:00:01Z"
    assert (line["Descriptions"], line["Fields"], line["Code"]) == ([], None, 2**62)
    assert line["extra"]["Blob"] == {"$bytes": "AP8="}
    assert line["extra"]["NaN"] == {"$float": "NaN"}
    assert line["extra"]["Tagged"] == {"$tag": [1234, "x"]}
    assert line["extra"]["Big"] == {"$int": str(2**70)}


def test_a_line_reads_back_to_the_same_value() -> None:
    key = keys.make_key("mail", 10**18, 7)
    value = codec.encode_one(ODD)
    assert ndjson.parse_line(ndjson.row_line(key, value)) == (key, value)


def test_corrupt_multi_message_and_legacy_rows_round_trip_byte_for_byte() -> None:
    two = codec.encode([Message(subject="a"), Message(subject="b")])
    for key, value in [
        (keys.make_key("q", 5, 1), b"\xff\x00 not cbor"),
        (keys.make_key("q", 6, 1), two),
        (b"q", two),
        (keys.make_key("q", 7, 1), b""),
    ]:
        line = ndjson.row_line(key, value)
        again_key, again_value = ndjson.parse_line(line)
        assert again_key == key
        assert ndjson.row_line(again_key, again_value) == line


def test_dump_writes_the_chosen_queues_in_key_order() -> None:
    for name in ["b", "a", "c"]:
        queue.store_failed_msgs(name, Message(subject=name))
    queue.store_failed_msgs("a", Message(subject="a2"))
    lines = [json.loads(x) for x in dumped(["c", "a"]).splitlines()]
    assert [(x["queue"], x["Subject"]) for x in lines] == [("c", "c"), ("a", "a"), ("a", "a2")]
    assert [json.loads(x)["queue"] for x in dumped().splitlines()] == ["a", "a", "b", "c"]


def test_load_keeps_keys_and_a_second_load_adds_nothing(tmp_path) -> None:
    for i in range(5):
        queue.store_failed_msgs("mail", Message(subject=f"s{i}", extra={"Attempts": i}))
    before = table_rows()
    path = tmp_path / "dump.ndjson"
    path.write_text(dumped())
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM deadletter_queuedmessage")
    assert ndjson.load(str(path)) == ndjson.Loaded(rows=5, inserted=5)
    assert table_rows() == before
    assert ndjson.load(str(path)) == ndjson.Loaded(rows=5, identical=5)
    assert table_rows() == before


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"queue": "mail"}', '"key"'),
        ('{"key": "zz", "queue": "mail"}', "not a key"),
        ('{"key": "6f7468657200' + "00" * 16 + '", "queue": "mail"}', "not a key of queue"),
        ('{"key": "KEY", "queue": "mail", "QueuedAt": "yesterday"}', ""),
        ('{"key": "KEY", "queue": "mail", "Code": "3"}', "Code"),
        ('{"key": "KEY", "queue": "mail", "Fields": [1]}', "Fields"),
        ('{"key": "KEY", "queue": "mail", "Surprise": 1}', "unknown fields: Surprise"),
        ('{"key": "KEY", "queue": "mail", "extra": {"x": {"$float": "big"}}}', "$float"),
        (
            '{"key": "KEY", "queue": "mail", "QueuedAt": "9999-12-15T00:00:00Z"}',
            "the message: queued_at 9999-12-15T00:00:00Z is in the future",
        ),
        (
            '{"key": "KEY", "queue": "mail", '
            '"messages": [{}, {"QueuedAt": "9999-01-01T00:00:00Z"}]}',
            "messages[1]: queued_at 9999-01-01T00:00:00Z is in the future",
        ),
        ('{"key": "KEY", "queue": "mail", "extra": {"x": ' + "[" * 100_000, "nested too deeply"),
        (
            '{"key": "KEY", "queue": "mail", "extra": {"x": '
            + "[" * 100_000
            + "]" * 100_000
            + "}}",
            "nested too deeply",
        ),
    ],
)
def test_a_malformed_line_is_named_and_nothing_of_the_file_loads(
    tmp_path, bad: str, why: str
) -> None:
    key = keys.make_key("mail", 10**18, 1).hex()
    good = ndjson.row_line(keys.make_key("mail", 10**18, 2), codec.encode_one(Message()))
    path = tmp_path / "dump.ndjson"
    path.write_text(good * 3 + bad.replace("KEY", key) + "\n" + good)
    with pytest.raises(ndjson.LoadError, match=f"^line 4: .*{__import__('re').escape(why)}"):
        ndjson.load(str(path))
    assert table_rows() == []


def test_blank_lines_are_skipped_and_not_utf8_is_refused(tmp_path) -> None:
    line = ndjson.row_line(keys.make_key("mail", 10**18, 2), codec.encode_one(Message()))
    path = tmp_path / "dump.ndjson"
    path.write_text("\n" + line + "\n")
    assert ndjson.load(str(path)) == ndjson.Loaded(rows=1, inserted=1)
    path.write_bytes(b"\xff\xfe\n")
    with pytest.raises(ndjson.LoadError, match="UTF-8"):
        ndjson.load(str(path))


# --- what the queue would never hand over ----------------------------------------------


def test_a_row_over_the_size_limit_is_named_and_nothing_of_the_file_loads(
    tmp_path, settings
) -> None:
    settings.DEADLETTER_MAX_ROW_BYTES = 1000
    small = ndjson.row_line(keys.make_key("mail", 10**18, 1), codec.encode_one(Message()))
    big = Message(fields=["x" * 2000])
    path = tmp_path / "dump.ndjson"
    path.write_text(
        small + ndjson.row_line(keys.make_key("mail", 10**18, 2), codec.encode_one(big))
    )
    with pytest.raises(
        ndjson.LoadError, match=r"^line 2: the row is 2,\d{3} bytes, over DEADLETTER_MAX"
    ):
        ndjson.load(str(path))
    assert table_rows() == []


def test_a_legacy_aggregate_over_the_size_limit_loads(tmp_path, settings) -> None:
    """The queue splits an aggregate a message at a time, whatever its size."""
    settings.DEADLETTER_MAX_ROW_BYTES = 1000
    value = codec.encode([Message(fields=["x" * 600]), Message(fields=["y" * 600])])
    path = tmp_path / "dump.ndjson"
    path.write_text(ndjson.row_line(b"mail", value))
    assert ndjson.load(str(path)).inserted == 1
    assert table_rows() == [(b"mail", value)]


# --- keys already queued ----------------------------------------------------------------


def dump_of(tmp_path, *rows: tuple[bytes, str]) -> str:
    """A dump file of one message a row, `(key, subject)` each; returns its path."""
    path = tmp_path / "dump.ndjson"
    path.write_text(
        "".join(ndjson.row_line(key, codec.encode_one(Message(subject=s))) for key, s in rows)
    )
    return str(path)


def test_a_key_queued_with_other_content_is_a_conflict_left_as_queued(tmp_path) -> None:
    held, same, new = (keys.make_key("mail", 10**18, seq) for seq in (1, 2, 3))
    queued = codec.encode_one(Message(subject="retried", extra={"Attempts": 2}))
    insert(held, queued)
    insert(same, codec.encode_one(Message(subject="same")))
    loaded = ndjson.load(dump_of(tmp_path, (held, "as dumped"), (same, "same"), (new, "new")))
    assert loaded == ndjson.Loaded(
        rows=3, inserted=1, identical=1, conflicting=1, conflicts=[(1, held)]
    )
    assert dict(table_rows())[held] == queued


def test_a_key_twice_in_the_file_is_identical_or_a_conflict_by_its_content(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(ndjson, "BATCH", 2)
    key = keys.make_key("mail", 10**18, 1)
    loaded = ndjson.load(
        dump_of(tmp_path, (key, "first"), (key, "first"), (key, "other"), (key, "other"))
    )
    assert (loaded.inserted, loaded.identical, loaded.conflicting) == (1, 1, 2)
    assert loaded.conflicts == [(3, key), (4, key)]
    assert table_rows() == [(key, codec.encode_one(Message(subject="first")))]


def test_only_the_first_conflicts_are_kept_and_all_are_counted(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(ndjson, "SHOWN_CONFLICTS", 2)
    held = [keys.make_key("mail", 10**18, seq) for seq in range(4)]
    for key in held:
        insert(key, codec.encode_one(Message(subject="queued")))
    loaded = ndjson.load(dump_of(tmp_path, *((key, "dumped") for key in held)))
    assert loaded.conflicting == 4
    assert [number for number, _ in loaded.conflicts] == [1, 2]


def test_a_key_another_writer_took_meanwhile_is_judged_by_the_bytes_it_holds(
    tmp_path, monkeypatch
) -> None:
    """The batch's first read saw none of its keys; two were queued by then."""
    same, other, new = (keys.make_key("mail", 10**18, seq) for seq in (1, 2, 3))
    insert(same, codec.encode_one(Message(subject="same")))
    insert(other, codec.encode_one(Message(subject="queued")))
    read = ndjson._held
    calls: list[int] = []

    def first_read_sees_nothing(cursor, table, batch):
        calls.append(len(batch))
        return {} if len(calls) == 1 else read(cursor, table, batch)

    monkeypatch.setattr(ndjson, "_held", first_read_sees_nothing)
    loaded = ndjson.load(dump_of(tmp_path, (same, "same"), (other, "dumped"), (new, "new")))
    assert loaded == ndjson.Loaded(
        rows=3, inserted=1, identical=1, conflicting=1, conflicts=[(2, other)]
    )
    assert calls == [3, 3]


def test_entries_kept_as_bytes_round_trip_byte_for_byte() -> None:
    plain = codec.encode([Message(subject="s", extra={"Origin": "o"})])
    kept = cbor2.dumps(7) + cbor2.dumps("int key")
    value = plain[:1] + bytes([plain[1] + 1]) + plain[2:] + kept
    key = keys.make_key("q", 1, 1)
    line = ndjson.row_line(key, value)
    assert json.loads(line)["raw_entries"] == [{"$bytes": "B2dpbnQga2V5"}]
    assert ndjson.parse_line(line) == (key, value)


def test_raw_entries_that_are_not_bytes_are_refused() -> None:
    line = json.loads(ndjson.row_line(keys.make_key("q", 1, 1), codec.encode([Message()])))
    line["raw_entries"] = "B2dpbnQga2V5"
    with pytest.raises(ValueError, match="raw_entries"):
        ndjson.parse_line(json.dumps(line))


def test_a_redacted_dump_leaves_entries_kept_as_bytes_out(settings) -> None:
    settings.DEADLETTER_REDACT = {"*": ["Origin"]}
    plain = codec.encode([Message(subject="s")])
    kept = cbor2.dumps("Origin") + b"\x62\xff\xfe"  # cannot be masked: not text
    insert(keys.make_key("q", 1, 1), plain[:1] + bytes([plain[1] + 1]) + plain[2:] + kept)
    out = io.StringIO()
    ndjson.dump(out, ["q"], redact=True)
    line = json.loads(out.getvalue())
    assert "raw_entries" not in line
    assert line["Subject"] == "s"
