from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap
import time
import tracemalloc
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import cbor2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deadletter.wire import codec as codec_module
from deadletter.wire import reading
from deadletter.wire.codec import CodecError, decode, encode, encode_one, iter_decode
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import EventCode, Message
from tests.factories import FIXTURES, REPO

MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())

FIELD_NAMES = (
    "Timestamp",
    "QueuedAt",
    "Username",
    "Subject",
    "Descriptions",
    "Fields",
    "SkipRecipients",
    "Code",
)
ZERO_MESSAGE_MAP = next(
    p["hex"] for p in MANIFEST["encoding_probes"] if p["what"].startswith("Message{}")
)


def fixture_id(entry: dict[str, Any]) -> str:
    return entry.get("name") or entry["id"]


def stored_value(entry: dict[str, Any]) -> bytes:
    """The fixture's bytes: the loose file when it is one, else the row value."""
    if "name" in entry:
        return (FIXTURES / entry["name"]).read_bytes()
    return bytes.fromhex(entry["value_hex"])


def as_go_json(msg: Message) -> dict[str, Any]:
    """A message in the manifest's shape: times as Go text, nil lists as None."""
    return {
        "Timestamp": None if msg.timestamp is None else msg.timestamp.format(),
        "QueuedAt": None if msg.queued_at is None else msg.queued_at.format(),
        "Username": msg.username,
        "Subject": msg.subject,
        "Descriptions": msg.descriptions,
        "Fields": msg.fields,
        "SkipRecipients": msg.skip_recipients,
        "Code": int(msg.code),
    }


def wire_map(**fields: Any) -> dict[str, Any]:
    """A message map as Go writes it (all eight keys, zero values), with `fields` replaced."""
    base: dict[str, Any] = dict.fromkeys(FIELD_NAMES)
    base.update(Username="", Subject="", Code=0)
    base.update(fields)
    return base


def one(item: Any) -> bytes:
    return cbor2.dumps([item])


def decode_all_ways(value: bytes) -> list[Message]:
    """`decode`, after checking `iter_decode` agrees with it."""
    msgs = decode(value)
    assert list(iter_decode(value)) == msgs
    return msgs


def raises_codec_error_both_ways(value: bytes) -> str:
    with pytest.raises(CodecError) as caught:
        decode(value)
    with pytest.raises(CodecError):
        list(iter_decode(value))
    return str(caught.value)


ALL_FIXTURES = MANIFEST["files"] + [
    row
    for row in MANIFEST["rows"]
    if row["value_kind"] == "cbor" and row["go_decode_error"] is None
]
FIXTURE_VALUES = [stored_value(entry) for entry in ALL_FIXTURES]
T1 = bytes.fromhex(next(r for r in MANIFEST["rows"] if r["id"] == "telegram-queue/t1")["value_hex"])


# --- the Go fixtures ------------------------------------------------------------------------


@pytest.mark.parametrize("entry", MANIFEST["files"], ids=fixture_id)
def test_loose_file_is_the_value_the_manifest_describes(entry: dict[str, Any]) -> None:
    value = stored_value(entry)
    assert len(value) == entry["value_length"]
    assert hashlib.sha256(value).hexdigest() == entry["value_sha256"]
    assert value.hex() == entry["value_hex"]


@pytest.mark.parametrize("entry", ALL_FIXTURES, ids=fixture_id)
def test_fixture_decodes_to_the_manifest_messages(entry: dict[str, Any]) -> None:
    msgs = decode(stored_value(entry))
    assert [as_go_json(msg) for msg in msgs] == entry["messages"]
    assert all(msg.extra == {} for msg in msgs)


@pytest.mark.parametrize("entry", ALL_FIXTURES, ids=fixture_id)
def test_fixture_reencodes_to_the_original_bytes(entry: dict[str, Any]) -> None:
    value = stored_value(entry)
    again = encode(decode(value))
    assert again == value
    assert hashlib.sha256(again).hexdigest() == entry["value_sha256"]


@pytest.mark.parametrize("entry", ALL_FIXTURES, ids=fixture_id)
def test_iter_decode_yields_what_decode_returns(entry: dict[str, Any]) -> None:
    value = stored_value(entry)
    assert list(iter_decode(value)) == decode(value)


@pytest.mark.parametrize(
    "entry", [e for e in ALL_FIXTURES if len(e["messages"]) == 1], ids=fixture_id
)
def test_encode_one_writes_a_per_message_row_exactly(entry: dict[str, Any]) -> None:
    value = stored_value(entry)
    assert encode_one(decode(value)[0]) == value


def test_codes_decode_as_event_codes() -> None:
    codes = [
        decode(stored_value(e))[0].code for e in MANIFEST["files"] if e["name"].startswith("code-")
    ]
    assert codes == list(EventCode)
    assert all(type(code) is EventCode for code in codes)


def test_croatian_letters_survive_in_every_string_field() -> None:
    entry = next(e for e in MANIFEST["files"] if e["name"] == "unicode-hr.cbor")
    msg = decode(stored_value(entry))[0]
    assert msg.username == "đurđica.šimić@škola.hr"
    assert msg.fields is not None
    assert msg.fields[-1] == "č ć ž š đ Č Ć Ž Š Đ"


# --- encoding_probes and go_decoder_probes ----------------------------------------------------

FIELD_PROBES: dict[str, tuple[str, dict[str, Any]]] = {
    "zero time.Time (encoded alone)": ("Timestamp", {"timestamp": None}),
    "nil []string": ("Descriptions", {"descriptions": None}),
    "empty []string{}": ("Descriptions", {"descriptions": []}),
    '[]string{""}': ("Descriptions", {"descriptions": [""]}),
    "empty string": ("Subject", {"subject": ""}),
    "EventCode NationalExam (4)": ("Code", {"code": EventCode.NATIONAL_EXAM}),
}
TIME_PROBES = [p for p in MANIFEST["encoding_probes"] if p["what"].startswith("time ")]
LIST_PROBES = {
    "empty message list []Message{} via Encoder (the bot itself never encodes an empty list: "
    "it stores no bytes)",
    "nil message list []Message(nil)",
    "Message{} (all zero values)",
}


def test_every_encoding_probe_is_checked() -> None:
    known = set(FIELD_PROBES) | {p["what"] for p in TIME_PROBES} | LIST_PROBES
    assert {p["what"] for p in MANIFEST["encoding_probes"]} <= known


@pytest.mark.parametrize(
    "probe",
    [p for p in MANIFEST["encoding_probes"] if p["what"] in FIELD_PROBES],
    ids=lambda p: p["what"],
)
def test_field_probe_is_what_encode_writes_for_that_field(probe: dict[str, str]) -> None:
    key, fields = FIELD_PROBES[probe["what"]]
    written = encode_one(Message(**fields))
    assert cbor2.dumps(key) + bytes.fromhex(probe["hex"]) in written


@pytest.mark.parametrize("probe", TIME_PROBES, ids=lambda p: p["what"])
def test_time_probe_decodes_and_encodes_back(probe: dict[str, str]) -> None:
    text = cbor2.loads(bytes.fromhex(probe["hex"]))
    t = GoTime.parse(text)
    assert cbor2.dumps(t.format()) == bytes.fromhex(probe["hex"])
    written = encode_one(Message(timestamp=t))
    assert b"\x69Timestamp" + bytes.fromhex(probe["hex"]) in written


def test_zero_message_encodes_as_go_writes_message_zero_value() -> None:
    assert encode([Message()]) == b"\x81" + bytes.fromhex(ZERO_MESSAGE_MAP)


def test_empty_list_encodes_as_an_empty_array() -> None:
    assert encode([]) == b"\x80"


def test_nil_message_list_decodes_as_empty() -> None:
    assert decode_all_ways(b"\xf6") == []


@pytest.mark.parametrize(
    "probe",
    [p for p in MANIFEST["go_decoder_probes"] if p["result"].startswith("ok: ")],
    ids=lambda p: p["what"],
)
def test_go_decoder_probe_go_accepts_decodes_to_the_same_messages(probe: dict[str, str]) -> None:
    expected = json.loads(probe["result"].removeprefix("ok: "))
    msgs = decode_all_ways(bytes.fromhex(probe["input_hex"]))
    assert [as_go_json(msg) for msg in msgs] == expected


@pytest.mark.parametrize(
    "probe",
    [p for p in MANIFEST["go_decoder_probes"] if p["result"].startswith("error: ")],
    ids=lambda p: p["what"],
)
def test_go_decoder_probe_go_refuses_raises_codec_error(probe: dict[str, str]) -> None:
    raises_codec_error_both_ways(bytes.fromhex(probe["input_hex"]))


# --- decoding: shapes ---------------------------------------------------------------------------


def test_an_empty_value_is_an_empty_list() -> None:
    assert decode_all_ways(b"") == []


def test_undefined_is_an_empty_list_like_null() -> None:
    assert decode_all_ways(b"\xf7") == []


def test_corrupted_text_is_refused_by_its_shape() -> None:
    assert "text string" in raises_codec_error_both_ways(b"corrupted cbor data")


def test_every_truncation_of_a_row_is_refused() -> None:
    for length in range(1, len(T1)):
        raises_codec_error_both_ways(T1[:length])


@pytest.mark.parametrize(
    "value",
    [b"\xa0", b"\x01", b"\x20", b"\x41x", b"\x61x", b"\xf5", b"\xf9\x3c\x00", b"\xc1\x01", b"\xff"],
    ids=["map", "uint", "nint", "bytes", "text", "true", "float", "tag", "break"],
)
def test_a_value_that_is_not_a_list_is_refused(value: bytes) -> None:
    raises_codec_error_both_ways(value)


@pytest.mark.parametrize(
    "item",
    [1, "x", b"x", [], None, True, 1.5],
    ids=["int", "str", "bytes", "list", "null", "true", "float"],
)
def test_a_list_of_non_maps_is_refused(item: Any) -> None:
    assert "message 0: expected a map" in raises_codec_error_both_ways(one(item))


def test_trailing_bytes_after_the_list_are_ignored() -> None:
    assert decode_all_ways(T1 + b"\xff\x00garbage") == decode(T1)


def test_a_self_described_cbor_prefix_is_accepted() -> None:
    assert decode_all_ways(b"\xd9\xd9\xf7" + T1) == decode(T1)


def test_an_indefinite_length_list_is_read() -> None:
    body = bytes.fromhex(ZERO_MESSAGE_MAP)
    assert decode_all_ways(b"\x9f" + body + body + b"\xff") == [Message(), Message()]


def test_an_indefinite_length_list_without_its_end_is_refused() -> None:
    raises_codec_error_both_ways(b"\x9f" + bytes.fromhex(ZERO_MESSAGE_MAP))


def test_indefinite_length_maps_and_strings_inside_a_message_are_read() -> None:
    value = b"\x81\xbf\x67Subject\x7f\x62ab\x61c\xff\x6cDescriptions\x9f\x61x\xff\xff"
    assert decode_all_ways(value) == [Message(subject="abc", descriptions=["x"])]


def test_a_memoryview_from_a_database_driver_is_read() -> None:
    assert decode(memoryview(T1)) == decode(T1)  # type: ignore[arg-type]
    assert list(iter_decode(memoryview(T1))) == decode(T1)  # type: ignore[arg-type]


# --- decoding: fields ---------------------------------------------------------------------------


def test_missing_keys_give_go_zero_values() -> None:
    assert decode_all_ways(one({})) == [Message()]


def test_null_string_and_code_give_go_zero_values() -> None:
    assert decode_all_ways(one({"Subject": None, "Code": None})) == [Message()]


def test_null_inside_a_list_gives_an_empty_string_like_go() -> None:
    assert decode_all_ways(one({"Fields": ["a", None]})) == [Message(fields=["a", ""])]


def test_nil_and_empty_lists_stay_apart() -> None:
    msg = decode_all_ways(one({"Descriptions": None, "Fields": []}))[0]
    assert msg.descriptions is None
    assert msg.fields == []


@pytest.mark.parametrize("key", ["subject", "SUBJECT", "sUbJeCt"])
def test_keys_match_field_names_case_insensitively(key: str) -> None:
    msg = decode_all_ways(one({key: "hello"}))[0]
    assert msg.subject == "hello"
    assert msg.extra == {}


def test_a_non_ascii_look_alike_key_is_not_a_field() -> None:
    msg = decode_all_ways(one({"\u017fubject": "long s"}))[0]
    assert msg.subject == ""
    assert msg.extra == {"\u017fubject": "long s"}


def test_the_first_of_two_keys_naming_one_field_wins_like_go() -> None:
    value = b"\x81\xa2\x67Subject\x61a\x67subject\x61b"
    msg = decode_all_ways(value)[0]
    assert (msg.subject, msg.extra, msg.raw_entries) == ("a", {}, ())


def test_an_unknown_code_is_kept_as_a_plain_int() -> None:
    assert decode_all_ways(one({"Code": 2**63 - 1}))[0].code == 2**63 - 1


WRONG_TYPES = [
    pytest.param(item, field, id=repr(item))
    for item, field in [
        ({"Subject": 1}, "Subject"),
        ({"Username": b"bytes"}, "Username"),
        ({"Subject": ["x"]}, "Subject"),
        ({"Descriptions": ["ok", 2]}, "Descriptions[1]"),
        ({"Fields": "not a list"}, "Fields"),
        ({"SkipRecipients": {"a": "b"}}, "SkipRecipients"),
        ({"Code": -(2**63) - 1}, "Code"),
        ({"Code": 2**63}, "Code"),
        ({"Code": 1.0}, "Code"),
        ({"Code": "3"}, "Code"),
        ({"Code": True}, "Code"),
        ({"Timestamp": True}, "Timestamp"),
        ({"Timestamp": "yesterday"}, "Timestamp"),
        ({"QueuedAt": b"2026-01-01T00:00:00Z"}, "QueuedAt"),
        ({"QueuedAt": ["2026-01-01T00:00:00Z"]}, "QueuedAt"),
        ({"Timestamp": cbor2.CBORTag(0, 1)}, "Timestamp"),
        ({"Timestamp": cbor2.CBORTag(1, "2026-01-01T00:00:00Z")}, "Timestamp"),
        ({"Timestamp": cbor2.CBORTag(1, float("nan"))}, "Timestamp"),
        ({"Timestamp": float("inf")}, "Timestamp"),
        ({"Timestamp": 10**12}, "Timestamp"),
        ({"Timestamp": -(10**12)}, "Timestamp"),
        ({"Subject": cbor2.CBORTag(2, b"x")}, "Subject"),
        ({"QueuedAt": "2026-02-29T00:00:00Z"}, "QueuedAt"),
        ({"QueuedAt": "2026-01-01T00:00:00.5"}, "QueuedAt"),
        ({"Timestamp": "2026-01-01T24:00:00Z"}, "Timestamp"),
        ({"SkipRecipients": [b"x"]}, "SkipRecipients[0]"),
        ({"Fields": ["a", "b", cbor2.CBORTag(0, 3)]}, "Fields[2]"),
    ]
]


@pytest.mark.parametrize(("item", "field"), WRONG_TYPES)
def test_a_field_of_the_wrong_type_is_refused_by_name(item: dict[str, Any], field: str) -> None:
    assert f"message 0: {field}:" in raises_codec_error_both_ways(one(item))


@pytest.mark.parametrize(("item", "field"), WRONG_TYPES)
def test_a_field_of_the_wrong_type_in_gos_own_shape_is_refused_by_name(
    item: dict[str, Any], field: str
) -> None:
    assert f"message 0: {field}:" in raises_codec_error_both_ways(one(wire_map(**item)))


def outcome(read: Any) -> tuple[Any, ...]:
    """What decoding gave, comparable across paths: every field with its type, or the error."""
    try:
        msg = read()
    except CodecError as exc:
        return ("refused", str(exc))
    times = tuple(
        None if t is None else (type(t), t.unix_ns, t.offset, t.format())
        for t in (msg.timestamp, msg.queued_at)
    )
    return (
        "read",
        times,
        msg.username,
        msg.subject,
        msg.descriptions,
        msg.fields,
        msg.skip_recipients,
        type(msg.code),
        msg.code,
        tuple(msg.extra.items()),  # in order
    )


time_texts = st.sampled_from(
    [
        "2026-11-29T15:47:12.123456789Z",
        "2026-11-29T15:47:13Z",
        "2026-11-29T15:47:12.5+05:30",
        "2026-11-29T15:47:12.500Z",
        "2026-11-29T15:47:12+00:00",
        "2024-02-29T23:59:59-03:30",
        "2026-02-29T00:00:00Z",
        "2026-11-29T15:47:60Z",
        "0001-01-01T00:00:00Z",
        "0001-01-01T01:00:00+01:00",
        "0000-12-31T23:00:00-01:00",
        "0001-01-01T00:00:00.000000001Z",
        "yesterday",
        "",
    ]
)
field_values = st.one_of(
    st.none(),
    st.just(cbor2.undefined),
    st.booleans(),
    st.integers(-(2**64), 2**64 - 1) | st.sampled_from([0, 1, 4, 5, 2**63 - 1, 2**63]),
    st.floats(),
    st.text(max_size=4),
    time_texts,
    st.binary(max_size=3),
    st.lists(
        st.none() | st.just(cbor2.undefined) | st.text(max_size=3) | st.integers(), max_size=3
    ),
    st.builds(
        cbor2.CBORTag,
        st.sampled_from([0, 1, 2, 55]),
        time_texts | st.integers(-(10**10), 10**10) | st.floats(),
    ),
)


def fresh_copy(item: dict[str, Any]) -> dict[str, Any]:
    """`item` with its own lists: reading one puts "" for a null element in place."""
    return {key: list(value) if type(value) is list else value for key, value in item.items()}


@settings(max_examples=1000 * settings.default.max_examples // 100, deadline=None)
@given(st.lists(field_values, min_size=8, max_size=8))
def test_gos_own_shape_decodes_as_the_generic_path_does(values: list[Any]) -> None:
    item = dict(zip(FIELD_NAMES, values, strict=True))
    generic = outcome(lambda: reading.generic_message(fresh_copy(item), 3))
    fast = outcome(lambda: reading.message(fresh_copy(item), 3))
    assert fast == generic


plausible_time = st.none() | st.just(cbor2.undefined) | time_texts | st.integers(-(10**10), 10**10)
plausible_text = st.text(max_size=4) | st.none() | st.just(cbor2.undefined)
plausible_list = st.none() | st.lists(st.text(max_size=3) | st.none(), max_size=3)
plausible_code = st.integers(-(2**63), 2**63 - 1) | st.sampled_from([0, 3, 4, 5, None])


@settings(max_examples=500 * settings.default.max_examples // 100, deadline=None)
@given(
    st.tuples(
        plausible_time,
        plausible_time,
        plausible_text,
        plausible_text,
        plausible_list,
        plausible_list,
        plausible_list,
        plausible_code,
    )
)
def test_plausible_messages_in_gos_own_shape_decode_as_the_generic_path_does(
    values: tuple[Any, ...],
) -> None:
    item = dict(zip(FIELD_NAMES, values, strict=True))
    generic = outcome(lambda: reading.generic_message(fresh_copy(item), 0))
    assert outcome(lambda: reading.message(fresh_copy(item), 0)) == generic
    assert outcome(lambda: decode(one(item))[0]) == generic


def test_a_queued_at_in_an_hour_seen_before_reads_as_parse_does() -> None:
    first = decode(one(wire_map(QueuedAt="2026-11-29T15:00:00.1+01:00")))[0].queued_at
    assert first is not None and first.unix_ns  # its hour is now known
    for text in ("2026-11-29T15:59:59.999999999+01:00", "2026-11-29T15:07:08-02:30"):
        assert decode(one(wire_map(QueuedAt=text)))[0].queued_at == GoTime.parse(text)


def test_an_integer_map_key_go_skips_is_kept_as_bytes() -> None:
    value = b"\x81\xa2\x67Subject\x61x\x01\x01"
    msg = decode_all_ways(value)[0]
    assert (msg.subject, msg.extra, msg.raw_entries) == ("x", {}, (b"\x01\x01",))


def test_an_integer_map_key_past_int64_is_refused_as_the_newest_go_does() -> None:
    raises_codec_error_both_ways(b"\x81\xa1\x1b" + (2**64 - 1).to_bytes(8, "big") + b"\x01")


def test_a_byte_string_map_key_is_refused() -> None:
    assert "map key" in raises_codec_error_both_ways(b"\x81\xa1\x47Subject\x61x")


def test_invalid_utf8_is_refused() -> None:
    raises_codec_error_both_ways(b"\x81\xa1\x67Subject\x62\xff\xfe")


@pytest.mark.parametrize(
    "tagged",
    [b"\xc0\x01", b"\xd8\x1d\x05", b"\xd8\x19\x00", b"\xc4\x01", b"\xd8\x25\x41\x01"],
    ids=["bad tag 0", "dangling shared ref", "stray string ref", "bad decimal", "bad uuid"],
)
def test_a_tag_cbor2_would_choke_on_in_a_field_is_refused(tagged: bytes) -> None:
    raises_codec_error_both_ways(b"\x81\xa1\x67Subject" + tagged)


# --- decoding: times ----------------------------------------------------------------------------


def test_a_tag_0_time_keeps_its_nanoseconds() -> None:
    msg = decode_all_ways(one({"Timestamp": cbor2.CBORTag(0, "2026-01-02T03:04:05.123456789Z")}))[0]
    assert msg.timestamp == GoTime.parse("2026-01-02T03:04:05.123456789Z")


def test_a_tag_1_float_epoch_keeps_its_fraction_in_utc() -> None:
    msg = decode_all_ways(one({"Timestamp": cbor2.CBORTag(1, 1767323045.5)}))[0]
    assert msg.timestamp == GoTime.parse("2026-01-02T03:04:05.5Z")


def test_a_negative_epoch_is_before_1970() -> None:
    msg = decode_all_ways(one({"QueuedAt": -1}))[0]
    assert msg.queued_at == GoTime.parse("1969-12-31T23:59:59Z")


def test_go_zero_time_as_text_reads_as_none_like_go() -> None:
    msg = decode_all_ways(one({"QueuedAt": "0001-01-01T00:00:00Z"}))[0]
    assert msg.queued_at is None


def test_go_zero_time_as_epoch_reads_as_none_like_go() -> None:
    msg = decode_all_ways(one({"QueuedAt": -62_135_596_800}))[0]
    assert msg.queued_at is None


def test_a_time_in_another_zone_keeps_its_offset() -> None:
    msg = decode_all_ways(one({"Timestamp": "2026-06-30T23:59:59.000000001+05:30"}))[0]
    assert msg.timestamp is not None
    assert msg.timestamp.offset == 19_800
    assert msg.timestamp.unix_ns % 1_000_000_000 == 1


# --- unknown keys -------------------------------------------------------------------------------


def test_unknown_keys_survive_decode_and_encode_byte_exact() -> None:
    value = one(wire_map(Subject="retry", Attempts=3, LastError="smtp: 421 try again"))
    msg = decode_all_ways(value)[0]
    assert msg.extra == {"Attempts": 3, "LastError": "smtp: 421 try again"}
    assert encode([msg]) == value


def test_unknown_keys_before_the_fields_are_moved_after_them() -> None:
    value = one({"Attempts": 3, **wire_map(Subject="x")})
    assert encode(decode(value)) == one({**wire_map(Subject="x"), "Attempts": 3})


@pytest.mark.parametrize(
    "extra_value",
    [
        cbor2.CBORTag(0, "2026-01-01T00:00:00.123456789Z"),
        cbor2.CBORTag(2, b"\x01\x00\x00\x00\x00\x00\x00\x00\x00"),
        cbor2.CBORTag(1004, "2026-01-01"),
        cbor2.CBORTag(258, [1, 2]),
        cbor2.CBORTag(28, [cbor2.CBORTag(29, 0)]),
        cbor2.CBORTag(12345, {"nested": [None, True, -5]}),
        cbor2.undefined,
        cbor2.CBORSimpleValue(16),
    ],
    ids=repr,
)
def test_an_unknown_keys_tagged_or_special_value_is_written_back_unchanged(
    extra_value: Any,
) -> None:
    value = one(wire_map(Extra=extra_value))
    assert encode(decode(value)) == value


def test_a_message_writes_its_extra_keys_after_the_eight_fields() -> None:
    written = encode_one(Message(subject="x", extra={"Attempts": 3, "LastError": "boom"}))
    assert written[:2] == b"\x81\xaa"
    assert list(cbor2.loads(written)[0]) == [*FIELD_NAMES, "Attempts", "LastError"]


@pytest.mark.parametrize("key", ["Subject", "code", "QUEUEDAT"])
def test_an_extra_key_go_would_read_as_a_field_is_refused(key: str) -> None:
    with pytest.raises(CodecError, match=key):
        encode_one(Message(extra={key: 1}))


def test_an_extra_value_cbor_cannot_hold_is_refused_by_key() -> None:
    with pytest.raises(CodecError, match="'Handler'"):
        encode_one(Message(extra={"Handler": object()}))


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    "value",
    [{1: "x"}, [{"ok": {(1, 2): "x"}}], nested(40)],
    ids=["a map keyed by an int", "a map keyed by a tuple", "nesting past 32 levels"],
)
def test_an_extra_value_that_would_not_read_back_is_refused(value: Any) -> None:
    with pytest.raises(CodecError, match="would not read back"):
        encode_one(Message(extra={"Data": value}))
    with pytest.raises(CodecError, match="would not read back"):
        encode([Message(), Message(extra={"Data": value})])


def test_extra_maps_keyed_by_text_and_bytes_read_back() -> None:
    extra = {"Data": {"a": 1, b"b": [nested(25)]}}
    assert decode(encode_one(Message(extra=extra)))[0].extra == extra


def test_an_extra_key_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(CodecError):
        encode_one(Message(extra={1: "x"}))  # type: ignore[dict-item]


# --- encoding -----------------------------------------------------------------------------------


def test_encode_one_is_encode_of_a_one_message_list() -> None:
    msg = decode(T1)[0]
    assert encode_one(msg) == encode([msg])


def test_times_are_written_as_untagged_go_text_in_their_own_zone() -> None:
    t = GoTime.parse("2026-03-29T01:59:59.123456789+01:00")
    written = encode_one(Message(timestamp=t))
    assert b"\x69Timestamp\x78\x232026-03-29T01:59:59.123456789+01:00" in written


def test_a_datetime_assigned_after_construction_is_written_as_go_text() -> None:
    msg = Message()
    msg.queued_at = datetime(2026, 1, 1, 12, 0, 0, 500000, tzinfo=timezone(timedelta(hours=2)))
    assert decode(encode_one(msg))[0].queued_at == GoTime.parse("2026-01-01T12:00:00.5+02:00")


def test_a_naive_datetime_assigned_after_construction_is_refused() -> None:
    msg = Message()
    msg.timestamp = datetime(2026, 1, 1)
    with pytest.raises(CodecError, match="Timestamp"):
        encode_one(msg)


def test_go_zero_time_is_written_as_null() -> None:
    msg = Message(queued_at=GoTime.parse("0001-01-01T00:00:00Z"))
    assert encode_one(msg) == encode_one(Message())


def test_a_time_go_cannot_write_is_refused() -> None:
    msg = Message(
        timestamp=GoTime.from_unix_ns(GoTime.parse("9999-12-31T23:59:59Z").unix_ns + 10**9)
    )
    with pytest.raises(CodecError, match="Timestamp"):
        encode_one(msg)


def test_codes_are_written_as_unsigned_integers() -> None:
    assert encode_one(Message(code=2**63 - 1)).endswith(
        b"\x64Code\x1b\x7f\xff\xff\xff\xff\xff\xff\xff"
    )


class StrSubclass(str):
    __slots__ = ()


@pytest.mark.parametrize(
    ("fields", "name"),
    [
        ({"subject": 5}, "Subject"),
        ({"username": None}, "Username"),
        ({"descriptions": ["a", 1]}, "Descriptions[1]"),
        ({"descriptions": ["a", "b", StrSubclass("c")]}, "Descriptions[2]"),
        ({"fields": "ab"}, "Fields"),
        ({"skip_recipients": {"a"}}, "SkipRecipients"),
        ({"code": -(2**63) - 1}, "Code"),
        ({"code": 2**63}, "Code"),
        ({"code": True}, "Code"),
        ({"code": 1.0}, "Code"),
    ],
    ids=repr,
)
def test_a_message_go_could_not_read_is_refused_by_field(fields: dict[str, Any], name: str) -> None:
    msg = Message()
    for attribute, value in fields.items():
        setattr(msg, attribute, value)
    with pytest.raises(CodecError, match=re.escape(f"message 0: {name}:")):
        encode([msg])


def test_a_non_message_is_refused() -> None:
    with pytest.raises(CodecError):
        encode([{"Subject": "x"}])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("count", "head"), [(23, b"\x97"), (24, b"\x98\x18"), (300, b"\x99\x01\x2c")]
)
def test_a_list_head_takes_the_shortest_form(count: int, head: bytes) -> None:
    assert encode([Message()] * count).startswith(head)


# --- iter_decode --------------------------------------------------------------------------------


def test_iter_decode_yields_the_first_message_before_reaching_a_corrupt_second() -> None:
    first = bytes.fromhex(ZERO_MESSAGE_MAP)
    messages = iter_decode(b"\x82" + first + b"\xa1\x67Subject\x62\xff\xfe")
    assert next(messages) == Message()
    with pytest.raises(CodecError, match="message 1"):
        next(messages)


def test_iter_decode_refuses_a_value_that_is_not_a_list_before_iterating() -> None:
    with pytest.raises(CodecError):
        iter_decode(b"corrupted cbor data")


def test_iter_decode_holds_one_message_at_a_time() -> None:
    value = encode([decode(T1)[0]] * 5000)
    tracemalloc.start()
    try:
        for _ in iter_decode(value):
            pass
        _, iterating = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        decode(value)
        _, decoding = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert iterating < 64 * 1024 < decoding


# --- hostile input --------------------------------------------------------------------------------

HUGE_HEADS = [
    b"\x9b\xff\xff\xff\xff\xff\xff\xff\xff",
    b"\x9a\xff\xff\xff\xff",
    b"\x5b" + b"\xff" * 8,
    b"\x5b\x00\x00\x00\x01\x00\x00\x00\x00",
    b"\x7b\x7f\xff\xff\xff\xff\xff\xff\xff",
    b"\x7a\x80\x00\x00\x00",
    b"\xbb\x7f\xff\xff\xff\xff\xff\xff\xff",
]


@pytest.mark.parametrize("head", HUGE_HEADS, ids=bytes.hex)
@pytest.mark.parametrize(
    "where",
    [b"", b"\x81", b"\x81\xa1\x67Subject", b"\x81\xa1\x65Extra\x81"],
    ids=["top", "item", "field", "nested extra"],
)
def test_a_length_head_claiming_more_than_the_input_is_refused_quickly(
    head: bytes, where: bytes
) -> None:
    started = time.perf_counter()
    raises_codec_error_both_ways(where + head)
    assert time.perf_counter() - started < 0.5


def test_a_list_claiming_more_messages_than_bytes_is_refused_before_decoding() -> None:
    assert "claims" in raises_codec_error_both_ways(b"\x9a\x00\x01\x00\x00" + T1[1:])


@pytest.mark.parametrize(
    "value", [b"\x81" * 100_000, b"\x9f" * 100_000, b"\x81\xa1\x65Extra" + b"\xa1\x60" * 50_000]
)
def test_deep_nesting_is_refused_quickly(value: bytes) -> None:
    started = time.perf_counter()
    raises_codec_error_both_ways(value)
    assert time.perf_counter() - started < 0.5


def test_nesting_beyond_gos_limit_of_32_is_refused() -> None:
    value = b"\x81\xa1\x65Extra" + b"\x81" * 31 + b"\x00"
    raises_codec_error_both_ways(value)


def test_nesting_within_gos_limit_of_32_is_read() -> None:
    value = b"\x81\xa1\x65Extra" + b"\x81" * 30 + b"\x00"
    assert decode_all_ways(value)[0].extra["Extra"] is not None


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux's")
def test_huge_length_heads_allocate_nothing_under_a_tight_memory_limit() -> None:
    """cbor2 6 reads strings in bounded chunks and grows containers as items arrive.

    Under an address-space limit 256 MiB above the interpreter's size, any
    attempt to allocate what a head claims (GiBs to EiBs) would fail and end
    the child with MemoryError or an abort instead of a clean exit.
    """
    script = textwrap.dedent(
        """
        import resource
        from deadletter.wire.codec import CodecError, decode, iter_decode

        size = next(l for l in open("/proc/self/status") if l.startswith("VmSize:"))
        limit = int(size.split()[1]) * 1024 + 256 * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        heads = []
        for initial, width in [(0x5A, 4), (0x5B, 8), (0x7A, 4), (0x7B, 8),
                               (0x9A, 4), (0x9B, 8), (0xBA, 4), (0xBB, 8)]:
            for claim in (2**31, 2**32 - 1, 2**40, 2**63, 2**64 - 1):
                if claim < 2 ** (8 * width):
                    heads.append(bytes([initial]) + claim.to_bytes(width, "big"))
        for head in heads:
            for where in (b"", b"\\x81", b"\\x81\\xa1\\x67Subject", b"\\x81\\xa1\\x65Extra\\x81"):
                for read in (decode, lambda v: list(iter_decode(v))):
                    try:
                        read(where + head + b"abc")
                    except CodecError:
                        continue
                    raise SystemExit(f"accepted {(where + head).hex()}")
        try:
            bytearray(2**30)
        except MemoryError:
            print("limit held")
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    assert (result.returncode, result.stdout.strip()) == (0, "limit held"), result.stderr


# --- property tests -------------------------------------------------------------------------------


def only_codec_error(value: bytes) -> None:
    try:
        msgs = decode(value)
    except CodecError:
        msgs = None
    else:
        assert all(type(msg) is Message for msg in msgs)
    try:
        streamed = list(iter_decode(value))
    except CodecError:
        streamed = None
    if msgs is not None:
        assert streamed == msgs


@settings(max_examples=400 * settings.default.max_examples // 100, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_decode_or_raise_codec_error(value: bytes) -> None:
    only_codec_error(value)


@settings(max_examples=300 * settings.default.max_examples // 100, deadline=None)
@given(st.binary(max_size=60).map(lambda tail: b"\x81\xa1" + tail))
def test_arbitrary_bytes_inside_a_message_decode_or_raise_codec_error(value: bytes) -> None:
    only_codec_error(value)


mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10_000), st.integers(1, 255)),
    st.tuples(st.just("insert"), st.integers(0, 10_000), st.integers(0, 255)),
    st.tuples(st.just("delete"), st.integers(0, 10_000), st.just(0)),
    st.tuples(st.just("truncate"), st.integers(0, 10_000), st.just(0)),
    st.tuples(
        st.just("huge head"), st.integers(0, 10_000), st.sampled_from(range(len(HUGE_HEADS)))
    ),
)


def mutate(value: bytes, steps: list[tuple[str, int, int]]) -> bytes:
    data = bytearray(value)
    for kind, position, argument in steps:
        at = position % (len(data) + 1)
        if kind == "flip" and at < len(data):
            data[at] ^= argument
        elif kind == "insert":
            data[at:at] = bytes([argument])
        elif kind == "delete":
            del data[at : at + 1]
        elif kind == "truncate":
            del data[at:]
        elif kind == "huge head":
            data[at:at] = HUGE_HEADS[argument]
    return bytes(data)


@settings(
    max_examples=400 * settings.default.max_examples // 100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.sampled_from(FIXTURE_VALUES), st.lists(mutation, min_size=1, max_size=4))
def test_mutated_go_values_decode_or_raise_codec_error(
    value: bytes, steps: list[tuple[str, int, int]]
) -> None:
    only_codec_error(mutate(value, steps))


NS = 1_000_000_000
FIRST_NS = GoTime.parse("0000-01-02T00:00:00Z").unix_ns
LAST_NS = GoTime.parse("9999-12-30T23:59:59.999999999Z").unix_ns
GO_ZERO_NS = GoTime.parse("0001-01-01T00:00:00Z").unix_ns

go_times = st.builds(
    GoTime.from_unix_ns,
    st.one_of(
        st.integers(FIRST_NS, LAST_NS),
        st.builds(
            lambda seconds, nanos: seconds * NS + nanos,
            st.integers(FIRST_NS // NS + 1, LAST_NS // NS),
            st.sampled_from([0, 1, 120_000_000, 100_000, 999_999_999]),
        ),
    ).filter(lambda ns: ns != GO_ZERO_NS),
    st.integers(-24 * 60, 24 * 60).map(lambda minutes: minutes * 60),
)
string_lists = st.none() | st.lists(st.text(max_size=20), max_size=4)
simple_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
folded_names = {name.lower() for name in FIELD_NAMES}
extra_keys = st.text(max_size=12).filter(
    lambda key: not (key.isascii() and key.lower() in folded_names)
)
messages = st.builds(
    Message,
    timestamp=st.none() | go_times,
    queued_at=st.none() | go_times,
    username=st.text(max_size=30),
    subject=st.text(max_size=60),
    descriptions=string_lists,
    fields=string_lists,
    skip_recipients=string_lists,
    code=st.integers(-(2**63), 2**63 - 1),
    extra=st.dictionaries(extra_keys, simple_values, max_size=3),
)


@settings(max_examples=100 * settings.default.max_examples // 100, deadline=None)
@given(st.lists(messages, max_size=4))
def test_decoding_what_encode_wrote_gives_the_same_messages(msgs: list[Message]) -> None:
    written = encode(msgs)
    assert decode(written) == msgs
    assert list(iter_decode(written)) == msgs


@settings(max_examples=100 * settings.default.max_examples // 100, deadline=None)
@given(st.lists(messages, max_size=4))
def test_reencoding_decoded_bytes_gives_the_same_bytes(msgs: list[Message]) -> None:
    written = encode(msgs)
    assert encode(decode(written)) == written


def test_messages_compare_equal_across_a_round_trip_of_a_real_clock() -> None:
    msg = Message(timestamp=GoTime.now(), queued_at=datetime.now(UTC), subject="now")
    assert decode(encode_one(msg)) == [msg]


def test_decode_single_reads_a_per_message_row_like_decode() -> None:
    value = codec_module.encode_one(Message(subject="one", fields=["a"]))
    assert codec_module.decode_single(value) == codec_module.decode(value)[0]


@pytest.mark.parametrize("value", [b"", b"\x80", b"\xf6", b"\x82\xa0\xa0", b"\x81"])
def test_decode_single_leaves_other_shapes_to_decode(value: bytes) -> None:
    assert codec_module.decode_single(value) is None


def test_decode_single_refuses_a_corrupt_row() -> None:
    with pytest.raises(codec_module.CodecError):
        codec_module.decode_single(b"\x81\xa8garbage")


# --- counting without decoding --------------------------------------------------------------


def test_count_messages_reads_the_array_head() -> None:
    assert codec_module.count_messages(encode([Message(subject=str(i)) for i in range(30)])) == 30
    assert codec_module.count_messages(b"") == 0
    assert codec_module.count_messages(b"\xf6") == 0


def test_count_messages_does_not_decode_the_messages() -> None:
    assert codec_module.count_messages(b"\x82\xa1\x01\xa1") == 2  # both maps are broken


def test_count_messages_reads_an_indefinite_array_through() -> None:
    value = b"\x9f" + encode([Message(), Message()])[1:] + b"\xff"
    assert codec_module.count_messages(value) == 2
    with pytest.raises(CodecError):
        codec_module.count_messages(b"\x9f" + encode([Message()])[1:])


@pytest.mark.parametrize("value", [b"\xa1", b"\x83\xa1", b"\x9a\xff\xff\xff\xff"])
def test_count_messages_refuses_what_is_no_message_array(value: bytes) -> None:
    with pytest.raises(CodecError):
        codec_module.count_messages(value)


@pytest.mark.parametrize("code", [-1, 255, 65536, 2**40, -(2**63), 2**63 - 1])
def test_any_int_go_can_write_as_a_code_reads_rewrites_and_encodes_unchanged(code: int) -> None:
    times = {"Timestamp": "2026-11-30T10:27:43.547857549+01:00", "QueuedAt": "2026-11-30T09:30:00Z"}
    value = one(wire_map(**times, Code=code))
    (msg,) = decode_all_ways(value)
    assert msg.code == code
    assert reading.message(cbor2.loads(value)[0], 0) == msg  # the Python reading too
    assert encode_one(msg) == value
    assert encode_one(msg.replace(subject="changed")) == one(
        wire_map(**times, Subject="changed", Code=code)
    )


# --- hostile values cost time linear in their size -----------------------------------------


def _best_decode_seconds(value: bytes) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        decode(value)
        best = min(best, time.perf_counter() - start)
    return best


def test_a_long_run_of_self_described_tags_decodes_in_linear_time() -> None:
    message = encode_one(Message(subject="after the tags"))
    small = b"\xd9\xd9\xf7" * 50_000 + message  # 150 KB
    large = b"\xd9\xd9\xf7" * 400_000 + message  # 1.2 MB
    assert decode(large)[0].subject == "after the tags"
    assert list(iter_decode(large))[0].subject == "after the tags"
    assert codec_module.count_messages(large) == 1
    # 8x the bytes: linear work takes about 8x the time, the old quadratic cut 64x.
    assert _best_decode_seconds(large) < 24 * _best_decode_seconds(small)


@pytest.mark.parametrize(
    "value",
    [
        b"\x81" + b"\xd9\xd9\xf7" * 400_000 + one(wire_map())[1:],
        b"\x81\x7b" + (2**40).to_bytes(8, "big") + b"abc",
        b"\x81\x9b" + (2**40).to_bytes(8, "big") + b"\x01",
        b"\x81" + b"\x81" * 100_000,
    ],
    ids=["tags on a message", "text head of 1 TiB", "array head of 2^40", "deep nesting"],
)
def test_tags_nesting_and_huge_heads_inside_a_row_are_refused_at_once(value: bytes) -> None:
    raises_codec_error_both_ways(value)
