from __future__ import annotations

import copy
import json
import pickle
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deadletter.wire.gotime import GoOnlyTime, GoTime, _parse_any
from tests.factories import FIXTURES

MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())

NS = 1_000_000_000
MIN_NS = GoTime.parse("0000-01-01T00:00:00Z").unix_ns
MAX_NS = GoTime.parse("9999-12-31T23:59:59.999999999Z").unix_ns
DAY_NS = 86_400 * NS


def fixture_times() -> list[str]:
    times = {
        text
        for entry in MANIFEST["files"] + MANIFEST["rows"]
        for msg in entry["messages"]
        for text in (msg["Timestamp"], msg["QueuedAt"])
        if text is not None
    }
    return sorted(times)


def go_style(dt: datetime) -> str:
    """RFC3339Nano as Go writes it, derived independently from `datetime.isoformat`."""
    text = dt.isoformat(timespec="microseconds")
    clock, zone = text[:-6], text[-6:]
    clock = clock.rstrip("0").rstrip(".")
    return clock + ("Z" if zone == "+00:00" else zone)


@pytest.mark.parametrize("text", fixture_times())
def test_every_fixture_time_formats_back_to_the_same_text(text: str) -> None:
    assert GoTime.parse(text).format() == text


@pytest.mark.parametrize("text", fixture_times())
def test_every_fixture_time_is_the_instant_datetime_reads(text: str) -> None:
    assert GoTime.parse(text).to_datetime() == datetime.fromisoformat(text)


def test_nanoseconds_survive_in_a_half_hour_zone() -> None:
    t = GoTime.parse("2026-06-30T23:59:59.000000001+05:30")
    expected = datetime(2026, 6, 30, 18, 29, 59, tzinfo=UTC).timestamp()
    assert t.unix_ns == int(expected) * NS + 1
    assert t.offset == 5 * 3600 + 30 * 60


def test_nine_fraction_digits_survive_in_a_negative_zone() -> None:
    text = "2026-01-01T00:00:00.123456789-03:30"
    assert GoTime.parse(text).format() == text


def test_trailing_fraction_zeros_are_trimmed() -> None:
    t = GoTime.parse("2026-01-01T00:00:00Z")
    assert GoTime(t.unix_ns + 120_000_000).format() == "2026-01-01T00:00:00.12Z"
    assert GoTime(t.unix_ns + 100_000, -12_600).format() == "2025-12-31T20:30:00.0001-03:30"


def test_a_zero_fraction_is_left_out() -> None:
    assert GoTime.parse("2026-07-04T12:00:00.000Z").format() == "2026-07-04T12:00:00Z"


def test_offset_zero_is_written_as_z() -> None:
    assert GoTime.parse("2026-07-04T12:00:00+00:00").format() == "2026-07-04T12:00:00Z"
    assert GoTime.parse("2026-07-04T12:00:00-00:00").format() == "2026-07-04T12:00:00Z"


def test_offset_zero_is_written_as_z_however_many_zones_were_formatted_before() -> None:
    for minutes in range(-1440, 1441):
        GoTime.from_unix_ns(0, minutes * 60).format()
        GoTime.from_unix_ns(0, minutes * 60 + 1).format()
    assert GoTime(0).format() == "1970-01-01T00:00:00Z"


def test_a_non_zero_offset_is_written_as_hours_and_minutes() -> None:
    utc = GoTime.parse("2026-07-04T12:00:00Z")
    assert GoTime(utc.unix_ns, 7200).format() == "2026-07-04T14:00:00+02:00"


def test_the_same_instant_in_two_zones_is_equal_as_datetimes_are_yet_written_as_it_came() -> None:
    utc = GoTime.parse("2026-07-04T12:00:00Z")
    zagreb = GoTime.parse("2026-07-04T14:00:00+02:00")
    assert utc == zagreb
    assert hash(utc) == hash(zagreb)
    assert (utc.format(), zagreb.format()) == ("2026-07-04T12:00:00Z", "2026-07-04T14:00:00+02:00")


def test_times_order_by_instant_not_by_wall_clock() -> None:
    earlier = GoTime.parse("2026-07-04T13:00:00+02:00")
    later = GoTime.parse("2026-07-04T12:00:00Z")
    assert earlier < later
    assert sorted([later, earlier]) == [earlier, later]


def test_ordering_against_another_type_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        assert GoTime(0) < 0  # type: ignore[operator]


def test_equal_times_hash_equal() -> None:
    assert hash(GoTime.parse("2026-01-01T00:00:00Z")) == hash(GoTime(1_767_225_600 * NS))


def test_str_is_datetimes_and_format_is_gos() -> None:
    t = GoTime.parse("2026-01-01T00:00:00.5+01:00")
    assert str(t) == "2026-01-01 00:00:00.500000+01:00"
    assert t.format() == "2026-01-01T00:00:00.5+01:00"


def test_an_offset_with_seconds_prints_only_hours_and_minutes_like_go() -> None:
    assert GoTime(0, 19 * 60 + 32).format() == "1970-01-01T00:19:32+00:19"
    assert GoTime(0, -(19 * 60 + 32)).format() == "1969-12-31T23:40:28-00:19"


def test_an_offset_under_a_minute_west_prints_as_plus_zero_like_go() -> None:
    assert GoTime(0, -30).format() == "1969-12-31T23:59:30+00:00"


@pytest.mark.parametrize(
    "text",
    [
        "2024-02-29T00:00:00Z",
        "2000-02-29T00:00:00Z",
        "0000-01-01T00:00:00Z",
        "0000-02-29T12:00:00Z",
        "9999-12-31T23:59:59.999999999Z",
        "0001-01-01T00:00:00Z",
        "1969-12-31T23:59:59.999999999Z",
        "2026-01-01T00:00:00+24:00",
        "2026-01-01T00:00:00-23:59",
    ],
)
def test_edge_dates_round_trip(text: str) -> None:
    assert GoTime.parse(text).format() == text


@pytest.mark.parametrize(
    "text",
    [
        "",
        "2026-01-01",
        "2026-01-01T00:00:00",
        "2026-01-01 00:00:00Z",
        "2026-01-01t00:00:00Z",
        "2026-01-01T00:00:00z",
        "2026-1-01T00:00:00Z",
        "2026-01-01T0:00:00Z",
        "2026-13-01T00:00:00Z",
        "2026-00-01T00:00:00Z",
        "2026-01-00T00:00:00Z",
        "2026-04-31T00:00:00Z",
        "2026-02-29T00:00:00Z",
        "1900-02-29T00:00:00Z",
        "2026-01-01T24:00:00Z",
        "2026-01-01T00:60:00Z",
        "2026-01-01T00:00:60Z",
        "2026-01-01T00:00:00.Z",
        "2026-01-01T00:00:00.1234567890Z",
        "2026-01-01T00:00:00,5Z",
        "2026-01-01T00:00:00+0100",
        "2026-01-01T00:00:00+01",
        "2026-01-01T00:00:00+25:00",
        "2026-01-01T00:00:00+01:61",
        "2026-01-01T00:00:00Z ",
        " 2026-01-01T00:00:00Z",
        "+2026-01-01T00:00:00Z",
        "-0001-01-01T00:00:00Z",
        "10000-01-01T00:00:00Z",
        "\u0662\u0660\u0662\u0666-01-01T00:00:00Z",
        "2026-01-01T00:00:00\u2212" + "01:00",
    ],
)
def test_text_go_would_not_write_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        GoTime.parse(text)


def test_a_year_beyond_9999_cannot_be_formatted() -> None:
    with pytest.raises(ValueError):
        GoTime.from_unix_ns(MAX_NS + 1).format()


def test_a_year_before_0000_cannot_be_formatted() -> None:
    with pytest.raises(ValueError):
        GoTime.from_unix_ns(MIN_NS - 1).format()


def test_go_zero_time_is_zero() -> None:
    assert GoTime.parse("0001-01-01T00:00:00Z").is_zero()
    assert GoTime.parse("0001-01-01T01:00:00+01:00").is_zero()
    assert not GoTime(0).is_zero()


def test_from_datetime_keeps_microseconds_and_offset() -> None:
    dt = datetime(2026, 3, 29, 1, 59, 59, 123456, tzinfo=timezone(timedelta(hours=1)))
    assert GoTime.from_datetime(dt).format() == "2026-03-29T01:59:59.123456+01:00"


def test_from_datetime_takes_the_offset_a_named_zone_has_at_that_instant() -> None:
    zoneinfo = pytest.importorskip("zoneinfo")
    try:
        zagreb = zoneinfo.ZoneInfo("Europe/Zagreb")
    except zoneinfo.ZoneInfoNotFoundError:
        pytest.skip("no time zone database")
    assert GoTime.from_datetime(datetime(2026, 7, 1, 12, tzinfo=zagreb)).offset == 7200
    assert GoTime.from_datetime(datetime(2026, 1, 1, 12, tzinfo=zagreb)).offset == 3600


def test_from_datetime_refuses_a_naive_datetime() -> None:
    with pytest.raises(ValueError):
        GoTime.from_datetime(datetime(2026, 1, 1))


def test_to_datetime_is_in_the_times_own_offset() -> None:
    dt = GoTime.parse("2026-11-26T13:00:00.987654321+01:00").to_datetime()
    assert dt.utcoffset() == timedelta(hours=1)
    assert (dt.hour, dt.microsecond) == (13, 987654)


def test_to_datetime_truncates_the_wall_clock_fraction_before_the_epoch() -> None:
    dt = GoTime.parse("1969-12-31T23:59:59.999999999Z").to_datetime()
    assert dt == datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


def test_to_datetime_refuses_a_year_datetime_cannot_hold() -> None:
    with pytest.raises(ValueError):
        GoTime.parse("0000-06-01T00:00:00Z").to_datetime()


def test_now_is_utc_and_current() -> None:
    before = time.time_ns()
    now = GoTime.now()
    assert now.offset == 0
    assert before <= now.unix_ns <= time.time_ns()


def test_from_unix_ns_is_the_constructor() -> None:
    assert GoTime.from_unix_ns(5, 3600) == GoTime(5, 3600)


offsets = st.integers(min_value=-24 * 60, max_value=24 * 60).map(lambda minutes: minutes * 60)
instants = st.one_of(
    st.integers(min_value=MIN_NS + DAY_NS, max_value=MAX_NS - DAY_NS),
    st.tuples(
        st.integers(min_value=MIN_NS // NS + 86_400, max_value=MAX_NS // NS - 86_400),
        st.sampled_from([0, 1, 10, 100_000, 120_000_000, 500_000_000, 999_999_999]),
    ).map(lambda pair: pair[0] * NS + pair[1]),
)


@settings(max_examples=300 * settings.default.max_examples // 100, deadline=None)
@given(instants, offsets)
def test_parse_reads_back_every_time_format_writes(unix_ns: int, offset: int) -> None:
    t = GoTime.from_unix_ns(unix_ns, offset)
    back = GoTime.parse(t.format())
    assert back == t
    assert (back.unix_ns, back.offset) == (t.unix_ns, t.offset)


@settings(max_examples=300 * settings.default.max_examples // 100, deadline=None)
@given(
    st.datetimes(
        min_value=datetime(1, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=st.integers(-23 * 60, 23 * 60).map(lambda m: timezone(timedelta(minutes=m))),
    )
)
def test_format_agrees_with_datetimes_calendar(dt: datetime) -> None:
    t = GoTime.from_datetime(dt)
    assert t.format() == go_style(dt)
    assert t.to_datetime() == dt


# --- text kept as Go wrote it, read lazily -------------------------------------------------


@st.composite
def near_go_text(draw: st.DrawFn) -> str:
    """RFC 3339 text near what Go writes: mostly in range, sometimes one part out of it."""
    years = st.integers(0, 9999) | st.sampled_from([0, 1, 100, 1900, 2000, 2024])
    parts = {
        "year": f"{draw(years):04d}",
        "month": f"{draw(st.integers(1, 12)):02d}",
        "day": f"{draw(st.integers(1, 31) | st.integers(28, 31)):02d}",
        "hour": f"{draw(st.integers(0, 23)):02d}",
        "minute": f"{draw(st.integers(0, 59)):02d}",
        "second": f"{draw(st.integers(0, 59)):02d}",
        "fraction": draw(
            st.just("") | st.text("0123456789", min_size=1, max_size=9).map(lambda d: "." + d)
        ),
        "zone": draw(
            st.sampled_from(["Z", "+00:00", "-00:00", "+24:00", "-24:60", "+01:60"])
            | st.builds(
                lambda sign, h, m: f"{sign}{h:02d}:{m:02d}",
                st.sampled_from("+-"),
                st.integers(0, 24),
                st.integers(0, 59),
            )
        ),
    }
    broken = draw(st.none() | st.none() | st.sampled_from(sorted(parts)))
    if broken is not None:
        parts[broken] = draw(
            st.sampled_from(
                {
                    "year": ["-001", "10000", "+2026", "20 6"],
                    "month": ["00", "13", "99", "1"],
                    "day": ["00", "32", "39", "1"],
                    "hour": ["24", "29", "99", "1"],
                    "minute": ["60", "99", "1"],
                    "second": ["60", "61", "1"],
                    "fraction": [".", ".1234567890", ",5", ".1a"],
                    "zone": ["", "z", "+25:00", "+01:61", "+0100", "+01", "-1:00"],
                }[broken]
            )
        )
    return "{year}-{month}-{day}T{hour}:{minute}:{second}{fraction}{zone}".format(**parts)


def strict_reading(text: str) -> tuple[int, int] | None:
    """What the full parser (`GoTime._parse_any`, no kept text) makes of `text`."""
    try:
        t = _parse_any(text)
    except ValueError:
        return None
    return t.unix_ns, t.offset


@settings(max_examples=1000 * settings.default.max_examples // 100, deadline=None)
@given(near_go_text())
def test_parse_accepts_and_reads_exactly_what_the_full_parser_does(text: str) -> None:
    expected = strict_reading(text)
    if expected is None:
        with pytest.raises(ValueError):
            GoTime.parse(text)
        return
    t = GoTime.parse(text)
    assert (t.unix_ns, t.offset) == expected
    assert t == GoTime.from_unix_ns(*expected)
    assert hash(t) == hash(GoTime.from_unix_ns(*expected))
    assert t.format() == GoTime.from_unix_ns(*expected).format()


@pytest.mark.parametrize(
    "text",
    [
        "2026-11-29T15:47:12.123456789Z",
        "2026-11-29T15:47:12.5+05:30",
        "2024-02-29T00:00:00-03:30",
        "0000-01-01T00:00:00+24:59",
    ],
)
def test_go_text_is_kept_and_every_field_reads_the_same_in_any_order(text: str) -> None:
    expected = _parse_any(text)
    assert GoTime.parse(text).format() == text
    assert GoTime.parse(text).offset == expected.offset
    assert GoTime.parse(text).unix_ns == expected.unix_ns
    assert GoTime.parse(text) == expected
    assert hash(GoTime.parse(text)) == hash(expected)
    assert repr(GoTime.parse(text)) == repr(expected)
    if not text.startswith("0000"):
        assert GoTime.parse(text).to_datetime() == expected.to_datetime()
    lazy = GoTime.parse(text)
    assert not lazy < expected and not lazy > expected


@pytest.mark.parametrize(
    "text",
    [
        "0001-01-01T00:00:00Z",
        "0001-01-01T01:00:00+01:00",
        "0000-12-31T23:00:00-01:00",
        "0001-01-02T00:59:00+24:59",
    ],
)
def test_go_zero_time_is_zero_in_any_zone_go_can_write(text: str) -> None:
    assert GoTime.parse(text).is_zero()


@pytest.mark.parametrize(
    "text", ["0001-01-01T00:00:01Z", "0000-12-31T23:59:59Z", "2026-01-01T00:00:00Z"]
)
def test_a_time_next_to_go_zero_time_is_not_zero(text: str) -> None:
    assert not GoTime.parse(text).is_zero()


def test_non_canonical_text_is_written_back_canonically() -> None:
    assert GoTime.parse("2026-07-04T12:00:00.500+00:00").format() == "2026-07-04T12:00:00.5Z"
    assert GoTime.parse("2026-07-04T12:00:00+01:60").format() == "2026-07-04T12:00:00+02:00"


def test_a_time_cannot_be_changed() -> None:
    for t in (GoTime.parse("2026-07-04T12:00:00Z"), GoTime(5, 60)):
        with pytest.raises(AttributeError):
            t.unix_ns = 1  # type: ignore[misc]
        with pytest.raises(AttributeError):
            t.offset = 1  # type: ignore[misc]
        with pytest.raises(AttributeError):
            t.other = 1  # type: ignore[attr-defined]
        with pytest.raises(AttributeError):
            del t.offset  # type: ignore[misc]


def test_a_time_survives_pickle_and_copy() -> None:
    for t in (GoTime.parse("2026-07-04T12:00:00.25+02:00"), GoTime(-1, -3600)):
        assert pickle.loads(pickle.dumps(t)) == t
        assert copy.copy(t) == t
        assert copy.deepcopy(t) == t
        assert copy.deepcopy(t).format() == t.format()


def test_times_are_constructed_from_ints_not_text() -> None:
    with pytest.raises(TypeError):
        GoTime("2026-07-04T12:00:00Z")  # type: ignore[arg-type]


def test_a_time_matches_by_its_fields() -> None:
    match GoTime.parse("1970-01-01T01:00:00+01:00"):
        case GoTime(unix_ns, offset):
            assert (unix_ns, offset) == (0, 3600)
        case _:
            pytest.fail("no match")


# --- a GoTime is a datetime ---------------------------------------------------------------


def test_a_time_is_an_aware_datetime_with_its_fields() -> None:
    t = GoTime.parse("2026-11-30T10:27:43.547857549+01:00")
    assert isinstance(t, datetime)
    assert (t.year, t.month, t.day, t.hour, t.minute, t.second) == (2026, 11, 30, 10, 27, 43)
    assert (t.microsecond, t.nanosecond) == (547857, 549)
    assert t.utcoffset() == timedelta(hours=1)


def test_subtracting_times_and_datetimes_gives_a_timedelta() -> None:
    t = GoTime.parse("2026-11-30T10:00:00Z")
    assert datetime(2026, 11, 30, 12, tzinfo=UTC) - t == timedelta(hours=2)
    assert t - datetime(2026, 11, 30, 9, tzinfo=UTC) == timedelta(hours=1)
    assert isinstance(datetime.now(UTC) - GoTime.now(), timedelta)


def test_a_time_equals_the_plain_datetime_of_its_instant_unless_it_has_nanoseconds() -> None:
    whole = GoTime.parse("2026-11-30T11:00:00.5+01:00")
    assert whole == datetime(2026, 11, 30, 10, 0, 0, 500000, tzinfo=UTC)
    assert hash(whole) == hash(datetime(2026, 11, 30, 10, 0, 0, 500000, tzinfo=UTC))
    finer = GoTime.parse("2026-11-30T10:00:00.500000001Z")
    plain = datetime(2026, 11, 30, 10, 0, 0, 500000, tzinfo=UTC)
    assert finer != plain
    assert finer > plain and plain < finer
    assert not finer < plain and not plain > finer
    assert finer >= plain and plain <= finer


def test_times_compare_to_the_nanosecond() -> None:
    a = GoTime.parse("2026-11-30T10:00:00.000000001Z")
    b = GoTime.parse("2026-11-30T10:00:00.000000002Z")
    assert a < b and a != b and sorted([b, a]) == [a, b]


def test_comparing_with_a_naive_datetime_is_a_type_error_as_for_datetimes() -> None:
    with pytest.raises(TypeError):
        assert GoTime(0) < datetime(2026, 1, 1)
    assert GoTime(0) != datetime(1970, 1, 1)


def test_astimezone_and_adding_a_timedelta_keep_the_nanoseconds() -> None:
    t = GoTime.parse("2026-11-30T10:00:00.123456789Z")
    moved = t.astimezone(timezone(timedelta(hours=-5)))
    assert moved.format() == "2026-11-30T05:00:00.123456789-05:00"
    assert moved == t
    assert (t + timedelta(days=1)).format() == "2026-12-01T10:00:00.123456789Z"
    assert (timedelta(seconds=1) + t).format() == "2026-11-30T10:00:01.123456789Z"
    assert (t - timedelta(hours=1)).format() == "2026-11-30T09:00:00.123456789Z"


def test_replace_keeps_microseconds_and_writes_the_new_time() -> None:
    t = GoTime.parse("2026-11-30T10:00:00.123456789Z")
    assert t.replace(year=2020).format() == "2020-11-30T10:00:00.123456Z"


def test_a_naive_datetime_signature_gives_a_plain_datetime() -> None:
    made = GoTime(2026, 1, 1)
    assert type(made) is datetime
    aware = GoTime(2026, 1, 1, tzinfo=UTC)
    assert type(aware) is GoTime and aware.format() == "2026-01-01T00:00:00Z"


def test_djangos_date_filter_renders_a_time() -> None:
    from django.template import Context, Template

    rendered = Template('{{ t|date:"Y-m-d H:i:s.u e" }}').render(
        Context({"t": GoTime.parse("2026-11-30T10:27:43.547857549+01:00")})
    )
    assert rendered == "2026-11-30 09:27:43.547857 UTC"  # in the current time zone


def test_djangos_json_encoder_writes_a_time() -> None:
    from django.core.serializers.json import DjangoJSONEncoder

    text = json.dumps(GoTime.parse("2026-11-30T10:27:43.547857549Z"), cls=DjangoJSONEncoder)
    assert text == '"2026-11-30T10:27:43.547Z"'


def test_drfs_datetime_field_writes_a_time() -> None:
    from django.test import override_settings
    from rest_framework import serializers

    with override_settings(USE_TZ=True, TIME_ZONE="UTC"):
        field = serializers.DateTimeField()
        rendered = field.to_representation(GoTime.parse("2026-11-30T11:27:43.5+01:00"))
    assert rendered == "2026-11-30T10:27:43.500000Z"


# --- what datetime cannot hold ------------------------------------------------------------


@pytest.mark.parametrize(
    "text", ["0000-06-01T00:00:00Z", "2026-01-01T00:00:00+24:00", "2026-01-01T00:00:00-24:00"]
)
def test_a_time_datetime_cannot_hold_is_a_go_only_time_written_back_unchanged(text: str) -> None:
    t = GoTime.parse(text)
    assert type(t) is GoOnlyTime
    assert t.format() == text
    assert t == GoTime.from_unix_ns(t.unix_ns, t.offset)
    with pytest.raises(ValueError):
        t.to_datetime()


def test_a_go_only_time_orders_with_times_and_hashes_like_the_equal_one() -> None:
    far = GoTime.parse("2026-01-02T00:00:00+24:00")
    same = GoTime.parse("2026-01-01T00:00:00Z")
    assert far == same and hash(far) == hash(same)
    assert GoTime.parse("0000-06-01T00:00:00Z") < same


def test_the_constructor_refuses_what_datetime_cannot_hold() -> None:
    with pytest.raises(ValueError, match="from_unix_ns"):
        GoTime(0, 86_400)
