"""The search language: what each kind of term asks for, and one clear error for
each query that cannot run."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.test import override_settings

from deadletter.queue.search import MAX_TERMS, SearchError, parse, quote
from deadletter.queue.search.query import Cause, Code, FirstFailure, KeyPrefix, Phrase


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
