from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone

import pytest

from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import EventCode, Message


def test_known_codes_become_event_codes() -> None:
    for code in EventCode:
        msg = Message(code=int(code))
        assert msg.code is code
        assert type(msg.code) is EventCode


def test_unknown_codes_stay_plain_ints() -> None:
    msg = Message(code=99)
    assert msg.code == 99
    assert type(msg.code) is int


def test_an_int_subclass_code_is_read_by_its_value() -> None:
    class Code(int):
        pass

    assert Message(code=Code(4)).code is EventCode.NATIONAL_EXAM
    assert type(Message(code=Code(77)).code) is Code


def test_datetimes_become_gotimes_and_gotimes_are_kept() -> None:
    dt = datetime(2026, 11, 29, 12, 30, 15, 123456, tzinfo=timezone(timedelta(hours=1)))
    t = GoTime.parse("2026-11-29T12:30:15.123456789+01:00")
    msg = Message(timestamp=dt, queued_at=t)
    assert msg.timestamp == GoTime.from_datetime(dt)
    assert msg.queued_at is t


def test_a_time_of_another_type_is_refused() -> None:
    with pytest.raises(TypeError):
        Message(timestamp="2026-11-29T12:30:15Z")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Message(queued_at=0)  # type: ignore[arg-type]


def test_a_naive_datetime_is_refused() -> None:
    with pytest.raises(ValueError):
        Message(queued_at=datetime(2026, 1, 1))


def test_replace_copies_lists_and_extra() -> None:
    msg = Message(descriptions=["a"], fields=["b"], skip_recipients=["c"], extra={"X": [1]}, code=3)
    copy = msg.replace()
    assert copy == msg
    assert copy is not msg
    for name in ("descriptions", "fields", "skip_recipients", "extra"):
        assert getattr(copy, name) is not getattr(msg, name)
    assert copy.code is EventCode.FINAL_GRADE


def test_replace_keeps_nil_lists_nil() -> None:
    copy = Message(descriptions=[]).replace()
    assert copy.descriptions == []
    assert copy.fields is None


def test_replace_applies_changes_as_the_constructor_would() -> None:
    msg = Message(subject="s", descriptions=["a"])
    new_list = ["z"]
    changed = msg.replace(subject="t", descriptions=new_list, code=1, queued_at=datetime.now(UTC))
    assert (changed.subject, changed.code) == ("t", EventCode.EXAM)
    assert changed.descriptions is new_list
    assert type(changed.queued_at) is GoTime
    assert msg.subject == "s"


def test_replace_refuses_an_unknown_field() -> None:
    with pytest.raises(TypeError):
        Message().replace(colour="red")


def test_replace_keeps_a_subclass_and_its_own_fields() -> None:
    @dataclasses.dataclass(eq=True)
    class Tagged(Message):
        tag: str = "t"

    copy = Tagged(subject="s", tag="x", descriptions=["a"]).replace(subject="u")
    assert type(copy) is Tagged
    assert (copy.subject, copy.tag, copy.descriptions) == ("u", "x", ["a"])
