"""The search language: what each kind of term asks for, and one clear error for
each query that cannot run."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.test import override_settings

from deadletter.queue.search import MAX_TERMS, SearchError, parse, quote
from deadletter.queue.search.query import (
    Attempts,
    Cause,
    Code,
    FirstFailure,
    KeyPrefix,
    Phrase,
)


def test_free_words_and_phrases_are_case_folded_whole_words() -> None:
    query = parse('Timeout "Connection Refused" order-1234')
    assert query.conditions == (
        Phrase(("timeout",)),
        Phrase(("connection", "refused")),
        Phrase(("order", "1234")),
    )
    assert query.terms == {"timeout", "connection", "refused", "order", "1234"}


def test_qualifiers_name_a_text_a_code_a_cause_a_key_or_another_key() -> None:
    query = parse(
        'subject:"grade posted" user:alice error:timeout code:500 cause:"HTTP Error 503" '
        "key:0A1b order_id:1234 CeleryTask:shop.tasks.charge"
    )
    assert query.conditions == (
        Phrase(("grade", "posted"), "subject"),
        Phrase(("alice",), "user"),
        Phrase(("timeout",), "error"),
        Code(500),
        Phrase(("1234",), "key:order_id"),
        Phrase(("shop", "tasks", "charge"), "key:celerytask"),
    )
    assert query.causes == (Cause("HTTP Error 503"),)
    assert query.prefixes == (KeyPrefix("0a1b"),)


@override_settings(DEADLETTER_EVENT_CODES={3: "FINAL_GRADE"})
def test_a_code_is_a_number_or_its_configured_name() -> None:
    assert parse("code:final_grade").conditions == (Code(3),)
    with pytest.raises(SearchError, match="FINAL_GRADE"):
        parse("code:exam")


@override_settings(TIME_ZONE="UTC")
def test_after_and_before_take_iso_dates_and_date_times() -> None:
    query = parse("after:2026-12-01 before:2026-12-01T14:30+01:00")
    assert query.conditions == (
        FirstFailure(after=datetime(2026, 12, 1, tzinfo=UTC)),
        FirstFailure(before=datetime(2026, 12, 1, 13, 30, tzinfo=UTC)),
    )


def test_an_empty_search_matches_everything() -> None:
    assert not parse("   ")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('"unclosed phrase', "quote is not closed"),
        ('subject:"unclosed', "quote is not closed"),
        ("subject:", "needs a value"),
        ("!!!", "no word"),
        ("code:twelve", "code: wants a number"),
        ("key:xyz", "key: wants the start of a key in hex"),
        ("after:yesterday", "after: wants an ISO date"),
        ("before:2026-13-45", "before: wants an ISO date"),
        (" ".join(f"w{n}" for n in range(MAX_TERMS + 1)), "more than"),
        ("x" * 1001, "at most 1000"),
    ],
)
def test_a_malformed_search_is_one_clear_error(text: str, says: str) -> None:
    with pytest.raises(SearchError, match=says):
        parse(text)


def test_a_key_prefix_is_an_exact_key_range() -> None:
    assert KeyPrefix("0a1b").bounds() == (b"\x0a\x1b", b"\x0a\x1c")
    assert KeyPrefix("abf").bounds() == (b"\xab\xf0", b"\xac\x00")
    assert KeyPrefix("ff").bounds() == (b"\xff", None)


@pytest.mark.parametrize("cause", ['KeyError: "order"', "a \\ backslash", 'both \\" and "'])
def test_any_cause_quotes_into_a_term_that_parses_back_to_it(cause: str) -> None:
    assert parse(f"cause:{quote(cause)}").causes == (Cause(cause),)


def test_a_backslash_keeps_a_quote_inside_a_phrase() -> None:
    assert parse(r'"say \"hi\""').conditions == (Phrase(("say", "hi")),)


# --- comparisons ---------------------------------------------------------------------


def test_attempts_compare_as_written() -> None:
    assert parse("attempts:>3 attempts:<=1 ATTEMPTS:>=2 attempts:<9 attempts:4").conditions == (
        Attempts(">", 3),
        Attempts("<=", 1),
        Attempts(">=", 2),
        Attempts("<", 9),
        Attempts("=", 4),
    )


@override_settings(TIME_ZONE="UTC")
def test_after_and_before_take_their_own_comparisons() -> None:
    day = datetime(2026, 12, 1, tzinfo=UTC)
    assert parse("after:>2026-12-01 after:>=2026-12-01").conditions == (
        FirstFailure(after=day, after_strict=True),
        FirstFailure(after=day),
    )
    assert parse("before:<2026-12-01 before:<=2026-12-01").conditions == (
        FirstFailure(before=day),
        FirstFailure(before=day, before_inclusive=True),
    )


def test_an_age_is_a_first_failure_measured_from_now() -> None:
    before = datetime.now(UTC)
    (older,) = parse("age:>2d").conditions
    (younger,) = parse("age:<=90m").conditions
    after = datetime.now(UTC)
    assert isinstance(older, FirstFailure) and older.before is not None
    assert before - timedelta(days=2) <= older.before <= after - timedelta(days=2)
    assert not older.before_inclusive and older.after is None
    assert isinstance(younger, FirstFailure) and younger.after is not None
    assert before - timedelta(minutes=90) <= younger.after <= after - timedelta(minutes=90)
    assert not younger.after_strict and younger.before is None
    assert parse("age:>=1w").conditions[0].before_inclusive  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("error:>500", "error: takes no comparison (>)"),
        ("order_id:>100", "order_id: takes no comparison (>)"),
        ("code:>3", "code: takes no comparison (>)"),
        ("subject:<=x", "subject: takes no comparison (<=)"),
        ("key:>0a", "key: takes no comparison (>)"),
        ("after:<2026-12-01", "after: takes > or >="),
        ("before:>2026-12-01", "before: takes < or <="),
        ("before:=2026-12-01", "before: takes < or <="),
        ("age:2d", "age: wants >, >=, < or <="),
        ("age:=2d", "age: wants >, >=, < or <="),
        ("age:>2 days", "age: wants"),
        ("age:>2y", "age: wants"),
        ("age:>999999999w", "age: 999999999w reaches before the year 1"),
        ("attempts:>three", "attempts: wants a whole number"),
        ("attempts:>-1", "attempts: wants a whole number"),
        ("attempts:>", "attempts: needs a value after >"),
        (">3", "'>3' compares nothing"),
    ],
)
def test_any_other_comparison_is_one_clear_error(text: str, says: str) -> None:
    with pytest.raises(SearchError, match=re.escape(says)):
        parse(text)


def test_a_quoted_value_is_text_not_a_comparison() -> None:
    assert parse('error:">500" order_id:"=7"').conditions == (
        Phrase(("500",), "error"),
        Phrase(("7",), "key:order_id"),
    )
