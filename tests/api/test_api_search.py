"""The API's search: `?q=` on a queue's messages and across every queue, pages that
keep the search, and a 400 naming `q` for a search that cannot run."""

from __future__ import annotations

from typing import Any

import pytest

from deadletter.queue.search import SearchError, lookup, parse
from tests.factories import park

pytestmark = pytest.mark.django_db

BASE = "/api/deadletter"


def subjects(body: dict[str, Any]) -> list[str]:
    return [row["messages"][0]["subject"] for row in body["results"]]


def test_a_queues_messages_are_searched_with_q(api: Any) -> None:
    park("webhook to shop failed", "webhook to crm failed", "mail bounced")
    answer = api.get(f"{BASE}/queues/q/messages/", {"q": "webhook shop"})
    assert answer.status_code == 200, answer.content
    assert subjects(answer.json()) == ["webhook to shop failed"]


def test_the_search_across_queues_pages_and_keeps_the_search(api: Any) -> None:
    for queue in ("a", "b", "c"):
        park(f"order {queue}", "other", queue=queue)
    first = api.get(f"{BASE}/messages/", {"q": "order", "limit": 2}).json()
    assert subjects(first) == ["order a", "order b"]
    rest = api.get(first["next"]).json()
    assert subjects(rest) == ["order c"] and rest["next"] is None


def test_every_row_of_every_queue_without_a_search(api: Any) -> None:
    park("one", queue="a")
    park("two", queue="b")
    assert subjects(api.get(f"{BASE}/messages/").json()) == ["one", "two"]


@pytest.mark.parametrize("bad", ['subject:"open', "code:nine", "key:zz", "after:soon", "..."])
def test_a_search_that_cannot_run_is_a_400_naming_q(api: Any, bad: str) -> None:
    for url in (f"{BASE}/messages/", f"{BASE}/queues/q/messages/"):
        answer = api.get(url, {"q": bad})
        assert answer.status_code == 400, (url, bad, answer.content)
        assert list(answer.json()) == ["q"]


def test_a_comparison_on_attempts_is_read_as_written(api: Any) -> None:
    park("tried thrice", extra={"Attempts": 3})
    park("tried four times", extra={"Attempts": 4})
    for url in (f"{BASE}/messages/", f"{BASE}/queues/q/messages/"):
        assert subjects(api.get(url, {"q": "attempts:>3"}).json()) == ["tried four times"]
        assert subjects(api.get(url, {"q": "attempts:<=3"}).json()) == ["tried thrice"]


@pytest.mark.parametrize("bad", ["error:>500", "order_id:>100", "code:>3", "after:<2026-12-01"])
def test_any_other_comparison_is_a_400_saying_what_the_search_says(api: Any, bad: str) -> None:
    with pytest.raises(SearchError) as refused:
        parse(bad)
    for url in (f"{BASE}/messages/", f"{BASE}/queues/q/messages/"):
        answer = api.get(url, {"q": bad})
        assert answer.status_code == 400, (url, bad, answer.content)
        assert answer.json() == {"q": [str(refused.value)]}


def test_a_search_too_costly_for_a_page_is_a_400_naming_q(api: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(lookup, "MAX_CANDIDATES", 50)
    park(*[f"m{n}" for n in range(80)])
    for url in (f"{BASE}/messages/", f"{BASE}/queues/q/messages/"):
        answer = api.get(url, {"q": "attempts:>3"})
        assert answer.status_code == 400, (url, answer.content)
        assert "read 50 messages" in answer.json()["q"][0]
        assert api.get(url, {"q": "m7"}).status_code == 200  # a term narrows it in time
