"""A message map read as Go's decoder (fxamacker/cbor, default options) reads it into
`msgtypes.Message`, where cbor2's dict would read it otherwise: a key repeated, an
integer key, an unknown key's value cbor2 cannot hold, a tag Go ignores. The C
reading and the Python reading alone agree on each (the C code leaves them all to
Python)."""

from __future__ import annotations

from typing import Any

import cbor2
import pytest

from deadletter.wire import codec
from deadletter.wire.codec import CodecError, decode, encode, encode_one, iter_decode
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message

GO_FIELDS = {
    "Timestamp": "2026-11-29T12:00:00Z",
    "QueuedAt": "2026-11-29T12:00:00Z",
    "Username": "u",
    "Subject": "s",
    "Descriptions": None,
    "Fields": None,
    "SkipRecipients": None,
    "Code": 1,
}
OLDER = "2026-10-01T00:00:00Z"


def row(*entries: bytes, fields: dict[str, Any] | None = None) -> bytes:
    """A per-message row: Go's eight fields, then `entries` (each a key's and a value's
    CBOR bytes) as they are, repeats and all."""
    go = cbor2.dumps([fields or GO_FIELDS])
    count = 8 + len(entries)
    assert count < 24
    return b"\x81" + bytes([0xA0 + count]) + go[2:] + b"".join(entries)


def entry(key: Any, value: Any) -> bytes:
    return cbor2.dumps(key) + cbor2.dumps(value)


def read_every_way(value: bytes) -> Message:
    """The message of `value` by `decode`, `iter_decode` and the Python code alone, which agree."""
    [msg] = decode(value)
    assert list(iter_decode(value)) == [msg]
    assert decode(b"\x82" + value[1:] + value[1:]) == [msg, msg]
    with codec.python_only():
        assert decode(value) == [msg]
        assert list(iter_decode(value)) == [msg]
    return msg


def refused_every_way(value: bytes) -> str:
    with pytest.raises(CodecError) as caught:
        decode(value)
    with codec.python_only(), pytest.raises(CodecError):
        decode(value)
    with pytest.raises(CodecError):
        list(iter_decode(value))
    return str(caught.value)


# --- a key twice: the first wins, as in Go ------------------------------------


@pytest.mark.parametrize("again", ["QueuedAt", "queuedat", "QUEUEDAT"])
def test_queued_at_twice_reads_the_first_as_go_does(again: str) -> None:
    msg = read_every_way(row(entry(again, OLDER)))
    assert msg.queued_at == GoTime.parse(GO_FIELDS["QueuedAt"])
    assert (msg.extra, msg.raw_entries) == ({}, ())


def test_a_lower_case_key_first_wins_over_the_exact_name_after_it() -> None:
    fields = {("queuedat" if k == "QueuedAt" else k): v for k, v in GO_FIELDS.items()}
    msg = read_every_way(row(entry("QueuedAt", OLDER), fields=fields))
    assert msg.queued_at == GoTime.parse(GO_FIELDS["QueuedAt"])


def test_an_unknown_key_twice_keeps_the_first() -> None:
    msg = read_every_way(row(entry("Origin", "first"), entry("Origin", "second")))
    assert msg.extra == {"Origin": "first"}


def test_a_message_read_as_go_reads_it_is_written_with_each_key_once() -> None:
    msg = read_every_way(row(entry("QueuedAt", OLDER), entry("Origin", "o")))
    assert cbor2.loads(encode([msg])) == [{**GO_FIELDS, "Origin": "o"}]


# --- what Go skips and cbor2 cannot hold: kept as bytes -------------------------------


@pytest.mark.parametrize(
    "kept",
    [
        entry(7, "x"),
        entry(-(2**63), [1, 2]),
        entry(2**63 - 1, {"a": 1}),
        cbor2.dumps("Origin") + b"\x62\xff\xfe",  # text that is not UTF-8
        cbor2.dumps("Origin") + b"\x82\x01\x62\xc3\x28",  # the same, inside a list
        cbor2.dumps("Data") + b"\xa1\x01\x02",  # a map keyed by a number
    ],
    ids=["int key", "lowest int64 key", "highest int64 key", "bad utf-8", "nested", "int-keyed"],
)
def test_an_entry_go_skips_and_cbor2_cannot_hold_is_kept_and_written_back_unchanged(
    kept: bytes,
) -> None:
    value = row(entry("Traceparent", "00-ab"), kept)
    msg = read_every_way(value)
    assert (msg.subject, msg.extra, msg.raw_entries) == ("s", {"Traceparent": "00-ab"}, (kept,))
    assert encode_one(msg) == value
    assert encode([msg]) == value
    restamped = decode(encode_one(msg.replace(queued_at=None), GoTime.parse(OLDER).unix_ns))[0]
    assert restamped.raw_entries == (kept,)
    assert restamped.queued_at == GoTime.parse(OLDER)


@pytest.mark.parametrize(
    "value",
    [
        row(cbor2.dumps(2**64 - 1) + cbor2.dumps(1)),  # past int64: refused by cbor v2.9.3
        row(cbor2.dumps(b"Origin") + cbor2.dumps(1)),  # a byte-string key: refused by Go
        row(fields={**GO_FIELDS, "Subject": "x"})[:-1],  # truncated
        row(cbor2.dumps("Origin") + b"\x62\xff"),  # truncated inside an unknown value
        row(cbor2.dumps("Origin") + b"\xfc"),  # a reserved head
    ],
    ids=["big int key", "bytes key", "truncated", "truncated unknown value", "reserved head"],
)
def test_what_go_refuses_is_still_refused(value: bytes) -> None:
    refused_every_way(value)


def test_text_that_is_not_utf8_in_a_field_is_refused_as_go_refuses_it() -> None:
    go = row()
    at = go.index(cbor2.dumps("Username")) + len(cbor2.dumps("Username"))
    value = go[:at] + b"\x61\xff" + go[at + 2 :]
    assert "Username" in refused_every_way(value)


# --- tags Go's decoder ignores, and the one it does not -----------------------------


def test_a_tag_around_the_message_is_ignored_as_go_ignores_it() -> None:
    value = b"\x81\xc9" + cbor2.dumps([GO_FIELDS])[1:]
    assert read_every_way(value) == decode(cbor2.dumps([GO_FIELDS]))[0]


def test_a_tag_around_a_text_or_a_list_element_is_ignored_as_go_ignores_it() -> None:
    fields = {
        **GO_FIELDS,
        "Username": cbor2.CBORTag(9, "tagged"),
        "Fields": [cbor2.CBORTag(9, "f")],
    }
    msg = read_every_way(cbor2.dumps([fields]))
    assert (msg.username, msg.fields) == ("tagged", ["f"])


def test_a_tag_around_a_time_other_than_0_or_1_is_refused_as_go_refuses_it() -> None:
    # fxamacker/cbor parseToTime: "wrong tag number for time.Time, got 9, expect 0 or 1"
    fields = {**GO_FIELDS, "QueuedAt": cbor2.CBORTag(9, GO_FIELDS["QueuedAt"])}
    assert "QueuedAt" in refused_every_way(cbor2.dumps([fields]))


def test_a_repeated_key_inside_a_tagged_message_still_reads_the_first() -> None:
    value = row(entry("QueuedAt", OLDER))
    msg = read_every_way(value[:1] + b"\xc9" + value[1:])
    assert msg.queued_at == GoTime.parse(GO_FIELDS["QueuedAt"])


# --- writing -------------------------------------------------------------------------


def test_an_extra_value_that_would_come_back_as_bytes_is_refused() -> None:
    with pytest.raises(CodecError, match="would not read back"):
        encode_one(Message(extra={"Data": {1: "x"}}))


# --- the C reading leaves every one of them to the Python code ----------------------


@pytest.mark.parametrize(
    "value",
    [
        row(entry("QueuedAt", OLDER)),
        row(entry("queuedat", OLDER)),
        row(entry("Origin", 1), entry("Origin", 2)),
        row(entry(7, "x")),
        row(cbor2.dumps("Origin") + b"\x62\xff\xfe"),
        b"\x81\xc9" + cbor2.dumps([GO_FIELDS])[1:],
    ],
    ids=["QueuedAt twice", "queuedat after it", "unknown twice", "int key", "bad utf-8", "tag"],
)
def test_the_c_reading_leaves_each_to_the_python_code(value: bytes) -> None:
    speedups = pytest.importorskip("deadletter.wire._speedups")
    assert speedups.go_decode(value) is None
    with_c = decode(value)
    with codec.python_only():
        assert decode(value) == with_c
