from __future__ import annotations

import os
import threading

import pytest

from deadletter.wire import keys


def test_key_layout_is_name_nul_time_seq() -> None:
    assert keys.make_key("q", 1, 2) == b"q\x00" + (1).to_bytes(8, "big") + (2).to_bytes(8, "big")


def test_parse_key_returns_its_parts() -> None:
    assert keys.parse_key(keys.make_key("wébhook", 10**18, 7)) == ("wébhook", 10**18, 7)


def test_go_fixture_key_parses_to_its_manifest_time_and_seq(manifest: dict) -> None:
    row = next(r for r in manifest["rows"] if r["id"] == "telegram-queue/t1")
    parsed = keys.parse_key(bytes.fromhex(row["key_hex"]))
    assert parsed == ("telegram-queue", row["key_time_ns"], row["seq"])


@pytest.mark.parametrize(
    ("name", "problem"),
    [("", "empty"), ("a\x00b", "NUL"), ("x" * 256, "255"), ("é" * 128, "256 UTF-8 bytes")],
)
def test_invalid_queue_name_is_a_value_error_naming_the_problem(name: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        keys.encode_queue_name(name)


def test_255_byte_queue_name_is_accepted() -> None:
    assert keys.encode_queue_name("x" * 255) == b"x" * 255


def test_legacy_key_is_the_bare_name() -> None:
    assert keys.is_legacy_key(b"discord-queue")
    assert not keys.is_legacy_key(keys.new_key("discord-queue"))


def test_queue_bounds_hold_its_legacy_row_and_messages_only() -> None:
    low, high = keys.queue_bounds("queue")
    inside = [b"queue", keys.new_key("queue"), keys.make_key("queue", 2**64 - 1, 2**64 - 1)]
    outside = [b"queu", b"queue-two", keys.new_key("queue-two"), b"queue\x01", b"queuf"]
    assert all(low <= k < high for k in inside)
    assert not any(low <= k < high for k in outside)


def test_legacy_row_sorts_just_before_its_queue() -> None:
    message = keys.new_key("q")
    assert sorted([message, b"q", b"p\xff", b"q!"]) == [b"p\xff", b"q", message, b"q!"]


def test_keys_increase_strictly_when_the_clock_steps_back() -> None:
    gen = keys.KeyGenerator()
    issued = [gen.next("q", now_ns=t) for t in (1_000, 2_000, 500, 500, 1_999, 3_000)]
    assert issued == sorted(issued)
    assert len(set(issued)) == len(issued)


def test_keys_are_unique_across_threads() -> None:
    gen = keys.KeyGenerator()
    out: list[bytes] = []
    lock = threading.Lock()

    def work() -> None:
        mine = [gen.next("q") for _ in range(2_000)]
        with lock:
            out.extend(mine)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(out)) == 8_000


def test_two_generators_in_one_nanosecond_give_different_keys() -> None:
    assert keys.KeyGenerator().next("q", now_ns=5) != keys.KeyGenerator().next("q", now_ns=5)


def test_parse_key_rejects_a_legacy_key() -> None:
    with pytest.raises(ValueError, match="not a per-message key"):
        keys.parse_key(b"discord-queue")


def test_key_int_round_trip_finds_the_next_key() -> None:
    key = keys.make_key("q", 5, 2**64 - 1)
    assert keys.key_from_int(b"q", keys.key_to_int(key) + 1) == keys.make_key("q", 6, 0)


def test_written_at_reads_the_time_from_a_per_message_key() -> None:
    key = keys.make_key("q", 1_795_694_400_987_669_621, 1)
    assert keys.written_at(key).isoformat() == "2026-11-26T12:00:00.987669+00:00"


def test_written_at_of_a_legacy_key_is_none() -> None:
    assert keys.written_at(b"discord-queue") is None


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_does_not_continue_its_parents_counter() -> None:
    read_end, write_end = os.pipe()
    before = keys.parse_key(keys.new_key("q")).seq
    pid = os.fork()
    if pid == 0:  # the child: report its first key's seq, then leave at once
        os.write(write_end, keys.parse_key(keys.new_key("q")).seq.to_bytes(8, "big"))
        os._exit(0)
    os.close(write_end)
    child_seq = int.from_bytes(os.read(read_end, 8), "big")
    os.close(read_end)
    os.waitpid(pid, 0)
    parent_next = keys.parse_key(keys.new_key("q")).seq
    assert parent_next == before + 2**16
    assert child_seq != parent_next  # a fresh random start, not the parent's next seq


def test_text_of_a_key_longer_than_any_the_app_writes_still_reads() -> None:
    odd = b"q\x00" + b"\x01" * 400
    assert keys.from_text(keys.to_text(odd)) == odd
    with pytest.raises(ValueError):
        keys.from_text("00" * (keys.MAX_ADDRESSABLE_KEY_BYTES + 1))
