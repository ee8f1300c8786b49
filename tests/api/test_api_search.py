"""The API's search: `?q=` on a queue's messages and across every queue, pages that
keep the search, and a 400 naming `q` for a search that cannot run."""

from __future__ import annotations

from typing import Any

import pytest

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
