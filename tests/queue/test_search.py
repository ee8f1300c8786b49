"""A search finds what its query says among the live rows, on every database, and
the index stays in step with every way a row is written, rewritten or removed."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from deadletter.drain import Drainer
from deadletter.models import QueuedMessage, SearchTerm
from deadletter.queue import dequeue, store_failed_msgs
from deadletter.queue.causes import signature_at_park
from deadletter.queue.legacy import split_legacy_rows
from deadletter.queue.moves import move_msg
from deadletter.queue.search import (
    Count,
    count_matching,
    index,
    index_pending,
    iter_sweep,
    keys_page,
    lookup,
    matching_keys,
    parse,
    pending_count,
    quote,
)
from deadletter.transfer import ndjson
from deadletter.transfer.kvfile.importing import import_kv
from deadletter.wire import codec, keys
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message
from tests.drain.drain_harness import claim_held_by_another_thread
from tests.factories import FIXTURES, TABLE, insert, insert_at, park, raw_sql

pytestmark = pytest.mark.django_db(transaction=True)


def found(text: str, queue: str | None = "q") -> list[bytes]:
    return matching_keys(parse(text), queue=queue, limit=1000)


def subjects(text: str, queue: str | None = "q") -> list[str]:
    by_key = {bytes(m.key): m for m in QueuedMessage.objects.all()}
    return [codec.decode(bytes(by_key[k].value))[0].subject for k in found(text, queue)]


def failing(msg: Message) -> None:
    raise ConnectionError(f"refused by {msg.extra.get('host', 'nobody')}")


# --- what a query matches ------------------------------------------------------------


def test_free_words_match_whole_words_in_every_searchable_text() -> None:
    park("Grade posted", username="alice", descriptions=["weekly digest"], fields=["math"])
    park("Exam reminder", username="bob", extra={"LastError": "HTTP 503 from hooks"})
    park("Other", extra={"order_id": 1234, "args": ["shop.tasks.charge", {"plan": "pro"}]})
    assert subjects("grade") == ["Grade posted"]
    assert subjects("ALICE") == ["Grade posted"]
    assert subjects("digest") == ["Grade posted"]
    assert subjects("math") == ["Grade posted"]
    assert subjects("503") == ["Exam reminder"]
    assert subjects("1234") == ["Other"]
    assert subjects("pro") == ["Other"]
    assert subjects("charge") == ["Other"]
    assert subjects("grad") == []  # whole words only
    assert subjects("posted grade") == ["Grade posted"]  # every term must hold
    assert subjects("posted bob") == []


def test_a_phrase_wants_its_words_together_in_order() -> None:
    park("connection refused by peer", "refused connection")
    assert subjects('"connection refused"') == ["connection refused by peer"]


def test_qualifiers_look_in_one_text_only() -> None:
    park("timeout", username="carol")
    park("other", username="timeout", extra={"LastError": "carol said no"})
    assert subjects("subject:timeout") == ["timeout"]
    assert subjects("user:timeout") == ["other"]
    assert subjects("error:carol") == ["other"]
    assert subjects("user:carol") == ["timeout"]


def test_other_keys_are_qualified_by_name_case_insensitively() -> None:
    park("a", extra={"order_id": 1234})
    park("b", extra={"order_id": 99, "note": "1234"})
    park("c", extra={"CeleryTask": "shop.tasks.charge"})
    assert subjects("order_id:1234") == ["a"]
    assert subjects("ORDER_ID:1234") == ["a"]
    assert subjects("celerytask:shop.tasks.charge") == ["c"]
    assert subjects("CeleryTask:shop.tasks.refund") == []


def test_code_cause_key_and_first_failure() -> None:
    first = datetime(2026, 11, 20, 12, tzinfo=UTC)
    old, new = park("old", queued_at=first), park("new", code=3)
    QueuedMessage.objects.filter(key=new[0]).update(signature="HTTP Error #")
    assert subjects("code:3") == ["new"]
    assert subjects('cause:"HTTP Error #"') == ["new"]
    assert subjects(f"key:{old[0].hex()[:-4]}") == ["old"]
    assert subjects("before:2026-11-21") == ["old"]
    assert subjects("after:2026-11-21") == ["new"]
    assert subjects("after:2026-11-20T12:00:00Z before:2026-11-20T12:00:01Z") == ["old"]


def test_a_search_is_bounded_to_its_queue_or_spans_all() -> None:
    park("hello", queue="a")
    park("hello", queue="b")
    assert [keys.queue_of(k) for k in found("hello", "a")] == ["a"]
    assert sorted(keys.queue_of(k) for k in found("hello", None)) == ["a", "b"]


def test_a_row_that_does_not_decode_is_found_by_key_only() -> None:
    key = keys.new_key("q")
    insert(key, b"not cbor at all")
    assert found("cbor") == []
    assert found(f"key:{key.hex()}") == [key]


def test_a_legacy_row_matches_when_one_of_its_messages_does() -> None:
    insert(b"q", codec.encode([Message(subject="first"), Message(subject="second")]))
    assert found("second") == [b"q"]
    assert found('"first second"') == []


# --- pages, plans and cursors --------------------------------------------------------


def test_pages_read_forward_and_back_from_a_cursor() -> None:
    made = park(*[f"match {n}" for n in range(7)])
    park("no")
    query = parse("match")
    page, more = keys_page(query, queue="q", size=3)
    assert (page, more) == (made[:3], True)
    page, more = keys_page(query, queue="q", after_key=made[2], size=3)
    assert (page, more) == (made[3:6], True)
    page, more = keys_page(query, queue="q", after_key=made[5], size=3)
    assert (page, more) == (made[6:], False)
    page, more = keys_page(query, queue="q", before_key=made[6], size=3)
    assert (page, more) == (made[3:6], True)


def test_a_plan_counts_up_to_its_tail_key_and_a_batch_starts_after_its_cursor() -> None:
    made = park("x 1", "x 2", "x 3")
    park("x 4")
    query = parse("x")
    assert count_matching(query, queue="q", until_key=made[-1]) == Count(3)
    assert matching_keys(query, queue="q", after_key=made[0], until_key=made[-1]) == made[1:]
    assert count_matching(parse(""), queue="q", until_key=made[1]) == Count(2)


@pytest.mark.parametrize("text", ["x", "attempts:0", ""])
def test_a_bounded_count_stops_at_its_budget_and_says_at_least(text: str) -> None:
    made = park(*[f"x {n}" for n in range(6)])
    query = parse(text)
    counted = count_matching(query, queue="q", until_key=made[-1], budget=3)
    assert counted.capped and counted.found <= 3
    assert str(counted) == f"at least {counted.found}"
    whole = count_matching(query, queue="q", until_key=made[-1], budget=100)
    assert whole == Count(6) and str(whole) == "6" and int(whole) == 6


# --- the index in step with every write path ----------------------------------------


def postings(key: bytes) -> set[str]:
    return {p.term for p in SearchTerm.objects.filter(key=key)}


def test_a_park_writes_no_posting_and_a_search_indexes_it_first() -> None:
    (key,) = park("fresh words")
    assert postings(key) == set() and pending_count() == 1
    assert found("fresh") == [key]
    assert {"fresh", "words", "code:0"} <= postings(key)
    assert pending_count() == 0


def test_a_failed_attempt_rewrites_the_row_and_its_words(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.queue.test_search.failing"}
    (key,) = park("m", extra={"host": "alpha"})
    assert found("alpha") == [key]
    Drainer(["q"], log_progress=False).run()
    assert found("error:refused error:alpha") == [key]
    row = QueuedMessage.objects.get(key=key)
    msg = codec.decode(bytes(row.value))[0]
    store_failed_msgs("other", msg.replace(extra={"host": "beta", "LastError": "x"}))
    # A rewrite of the row itself (a handler's replacement) leaves no stale match.
    QueuedMessage.objects.filter(key=key).update(
        value=codec.encode_one(msg.replace(extra={"LastError": "gone"})), search_pending=1
    )
    assert found("error:alpha") == []
    assert found("error:gone") == [key]


def test_a_partial_delivery_rewrites_under_new_keys_that_are_found(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.queue.test_search.keep_one_recipient"}
    park("partly", skip_recipients=[])
    Drainer(["q"], log_progress=False).run()
    assert len(found("partly")) == 1


def keep_one_recipient(msg: Message) -> Message:
    return msg.replace(skip_recipients=["a"], subject="partly")


def test_the_legacy_split_kv_import_and_ndjson_load_are_all_found(tmp_path: Any) -> None:
    insert(b"legacy", codec.encode([Message(subject="split one"), Message(subject="two")]))
    split_legacy_rows(connection, TABLE)
    assert len(found("split", "legacy")) == 1
    report = import_kv(FIXTURES / "edb-small.sqlite")
    assert report
    (any_key,) = QueuedMessage.objects.exclude(key__startswith=b"legacy").values_list(
        "key", flat=True
    )[:1]
    imported = bytes(any_key)
    assert imported in found(f"key:{imported.hex()}", None)
    loaded = keys.make_key("loaded", GoTime.now().unix_ns, 7)
    line = ndjson.row_line(loaded, codec.encode_one(Message(subject="loaded from a file")))
    ndjson.load(io.StringIO(line + "\n"))
    assert len(found("loaded file", "loaded")) == 1


def test_the_sweep_removes_postings_of_delivered_rows_only() -> None:
    gone, kept = park("gone word", "kept word")
    index_pending()
    dequeue(gone)
    stale = postings(gone)
    assert stale  # a delivery writes nothing more
    assert found("word") == [kept]  # the join hides the stale posting
    assert sum(iter_sweep()) == len(stale)
    assert postings(gone) == set() and postings(kept)


def test_rows_written_by_raw_sql_are_pending_by_the_columns_default() -> None:
    key = insert_at("q", GoTime.now().unix_ns, 1, Message(subject="raw"))
    with connection.cursor() as cursor:
        cursor.execute(raw_sql("SELECT search_pending FROM {table} WHERE {key} = %s"), (key,))
        assert cursor.fetchone()[0] == 1
    assert found("raw") == [key]


def test_an_old_first_failure_is_found_in_the_key_range_of_today() -> None:
    (key,) = park("m", queued_at=datetime.now(UTC) - timedelta(days=20))
    assert found(f"before:{(datetime.now(UTC) - timedelta(days=19)).date()}") == [key]


def test_a_row_loaded_with_its_last_error_gets_its_cause_from_the_indexer() -> None:
    key = keys.make_key("loaded", GoTime.now().unix_ns, 9)
    value = codec.encode_one(Message(subject="m", extra={"LastError": "HTTP Error 503: down"}))
    ndjson.load(io.StringIO(ndjson.row_line(key, value) + "\n"))
    assert QueuedMessage.objects.get(key=key).signature is None
    index_pending()
    assert QueuedMessage.objects.get(key=key).signature == signature_at_park(
        keys.queue_of(key), codec.decode_single(value)
    )


def test_a_park_with_a_last_error_writes_its_cause_in_the_insert() -> None:
    (key,) = park("m", extra={"LastError": "ConnectionError: refused by 10.0.0.1"})
    assert QueuedMessage.objects.get(key=key).signature == "ConnectionError: refused by #"


def test_a_moved_row_is_found_in_its_new_queue_only() -> None:
    (key,) = park("moving words")
    assert found("moving") == [key]
    moved = move_msg(key, "elsewhere")
    assert moved is not None
    assert found("moving") == []
    assert found("moving", "elsewhere") == [moved]


@pytest.mark.skipif(connection.vendor == "sqlite", reason="row locks need a server")
def test_a_row_a_drain_holds_is_found_without_waiting_for_its_handler() -> None:
    held_key, free_key = park("held words", "free words")
    with claim_held_by_another_thread("q") as held:
        assert held == held_key
        assert found("words") == [held_key, free_key]
        # Had the indexer waited for the claim, the claim would have timed out and
        # the row been indexed: it is passed over instead, and the search checked it.
        assert pending_count() == 1
    assert found("held") == [held_key]
    assert pending_count() == 0


# --- comparisons ---------------------------------------------------------------------


def test_attempts_compare_with_the_failed_deliveries_so_far() -> None:
    for n in range(6):
        park(f"tried {n}", extra={"Attempts": n} if n else {})
    park("corrupt count", extra={"Attempts": "many"})
    assert subjects("attempts:>3") == ["tried 4", "tried 5"]
    assert subjects("attempts:<=1") == ["tried 0", "tried 1"]
    assert subjects("attempts:>=5") == ["tried 5"]
    assert subjects("attempts:3") == ["tried 3"]
    assert subjects("attempts:0") == ["tried 0"]


def test_an_age_and_strict_or_inclusive_bounds_on_the_first_failure() -> None:
    now = datetime.now(UTC)
    park("a week old", queue="ages", queued_at=now - timedelta(days=7))
    park("an hour old", queue="ages", queued_at=now - timedelta(hours=1))
    assert subjects("age:>2d", "ages") == ["a week old"]
    assert subjects("age:<2d", "ages") == ["an hour old"]
    assert subjects("age:>=30m age:<=3h", "ages") == ["an hour old"]
    park("on the edge", queue="edges", queued_at=datetime(2026, 11, 20, 12, tzinfo=UTC))
    edge = "2026-11-20T12:00:00Z"
    assert subjects(f"after:>{edge}", "edges") == []
    assert subjects(f"after:>={edge}", "edges") == ["on the edge"]
    assert subjects(f"after:{edge}", "edges") == ["on the edge"]
    assert subjects(f"before:<={edge}", "edges") == ["on the edge"]
    assert subjects(f"before:<{edge}", "edges") == []


# --- what a search costs --------------------------------------------------------------


def test_a_search_indexes_a_bounded_share_of_a_backlog_and_still_finds_every_match() -> None:
    share = index.REQUEST_ROWS
    total = share * 3
    made = park(*[f"backlog {n}" + (" needle" * (n % share == share - 1)) for n in range(total)])
    needles = [made[n] for n in range(total) if n % share == share - 1]
    assert pending_count() == total
    assert found("needle") == needles
    assert pending_count() >= total - index.REQUEST_ROWS
    assert keys_page(parse("backlog"), queue="q", size=5) == (made[:5], True)
    assert keys_page(parse("needle"), queue="q", before_key=made[-1], size=5) == (
        needles[:-1],
        False,
    )
    assert keys_page(parse("needle"), queue="q", after_key=needles[0], size=1) == (
        needles[1:2],
        True,
    )
    assert pending_count() >= total - 3 * index.REQUEST_ROWS  # each search indexed its share


def test_a_cause_waiting_for_the_indexer_is_found_past_what_a_search_indexes() -> None:
    lines = []
    for n in range(index.REQUEST_ROWS + 20):
        error = "HTTP Error 503: down" if n == index.REQUEST_ROWS + 10 else f"KeyError: {n}"
        key = keys.make_key("loaded", GoTime.now().unix_ns, n + 1)
        value = codec.encode_one(Message(subject=f"m{n}", extra={"LastError": error}))
        lines.append(ndjson.row_line(key, value))
    ndjson.load(io.StringIO("\n".join(lines) + "\n"))
    wanted = signature_at_park("loaded", Message(extra={"LastError": "HTTP Error 503: down"}))
    assert len(found(f"cause:{quote(wanted)}", "loaded")) == 1


def test_a_long_phrase_costs_a_few_statements_not_one_a_word() -> None:
    text = " ".join(f"w{n}" for n in range(200))
    (key, _) = park(text, "w1 w2 w3")
    index_pending()
    with CaptureQueriesContext(connection) as seen:
        assert found(f'"{text}"') == [key]
    statements = [query["sql"] for query in seen.captured_queries]
    assert len(statements) <= 12, statements
    assert max(statement.count("EXISTS") for statement in statements) <= 2


def test_a_page_that_would_read_too_much_is_refused_not_answered_late(monkeypatch: Any) -> None:
    monkeypatch.setattr(lookup, "MAX_CANDIDATES", 100)
    park(*[f"m {n}" for n in range(150)])
    (tried,) = park("tried", extra={"Attempts": 5})
    index_pending()
    with pytest.raises(lookup.SearchTooCostly, match="read 100 messages .* narrow it"):
        keys_page(parse("attempts:>3"), queue="q", size=10)
    with pytest.raises(lookup.SearchTooCostly):
        keys_page(parse("m attempts:>3"), queue="q", size=10)
    assert keys_page(parse("m"), queue="q", size=10)[1] is True  # a page filled in time
    assert keys_page(parse("tried attempts:>3"), queue="q", size=10) == ([tried], False)
    # A command reads without a bound.
    assert found("attempts:>3") == [tried]


def test_a_page_stops_at_its_time_too(monkeypatch: Any) -> None:
    monkeypatch.setattr(lookup, "MAX_SECONDS", 0.0)
    (key,) = park("m")
    with pytest.raises(lookup.SearchTooCostly, match=r"for at most 0 s"):
        keys_page(parse("m"), queue="q", size=10)
    assert found("m") == [key]  # a command's search has no time bound
