"""Drains, retries, purges and bulk deletes started from the admin and the API:
outside the request's transaction (ATOMIC_REQUESTS on in every test here), each
row settled on its own, and back within the time budget when a handler hangs."""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection, connections
from django.test import Client
from django.urls import resolve
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from deadletter import drain
from deadletter.drain import timeouts
from deadletter.models import QueuedMessage
from deadletter.wire import keys
from deadletter.wire.messages import Message
from tests.drain import web_harness
from tests.drain.drain_harness import (
    assert_only_messages_in_hand_were_delivered_twice,
    other_sessions_holding_locks,
)
from tests.factories import park, park_aged, parked, parked_messages, raw_sql
from tests.queue.test_queue import ELSEWHERE

pytestmark = pytest.mark.django_db(transaction=True)

ADMIN = "/admin/deadletter/queuedmessage/"
API = "/api/deadletter"

# What the module's handlers do; each test sets what it needs.
release = threading.Event()
in_hand = threading.Event()
parks: list[str | None] = []
park_args: dict[str, Any] = {}


def hanging_handler(msg: Message) -> None:
    """Hangs for 60 s (until the test ends)."""
    in_hand.set()
    release.wait(60)


def parking_handler(msg: Message) -> None:
    """Parks a message from another process while it runs, as a site's code would."""
    parks.append(web_harness.park_elsewhere(**park_args))


@pytest.fixture(autouse=True)
def atomic_requests() -> Iterator[None]:
    """ATOMIC_REQUESTS on for the project's database, as a project may set it
    (not on aliases other test modules add for their own tests)."""
    saved = {alias: connections[alias].settings_dict["ATOMIC_REQUESTS"] for alias in ["default"]}
    for alias in saved:
        connections[alias].settings_dict["ATOMIC_REQUESTS"] = True
    yield
    for alias, value in saved.items():
        connections[alias].settings_dict["ATOMIC_REQUESTS"] = value


@pytest.fixture(autouse=True)
def handlers(settings: Any) -> Iterator[None]:
    settings.DEADLETTER_HANDLERS = {
        "hangs": "tests.drain.test_web_drain.hanging_handler",
        "parks": "tests.drain.test_web_drain.parking_handler",
    }
    release.clear()
    in_hand.clear()
    parks.clear()
    yield
    release.set()
    deadline = time.monotonic() + 30
    while drain.hung_handlers() and time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.fixture
def user() -> User:
    return User.objects.create_superuser(web_harness.USER, password=web_harness.PASSWORD)


@pytest.fixture
def admin(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def api(user: User) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


# --- the views Django resolves are outside the request's transaction -----------------


@pytest.mark.parametrize(
    "path",
    [
        ADMIN,
        ADMIN + "overview/drain/",
        ADMIN + "overview/purge/",
        ADMIN + "00/retry/",
        API + "/queues/q/drain/",
        API + "/messages/00/",
    ],
)
def test_every_view_that_settles_rows_is_marked_non_atomic_for_every_database(path: str) -> None:
    """Django's `non_atomic_requests` must reach the callable the resolver returns,
    through the admin's `admin_view` / `update_wrapper` and DRF's `as_view`, for
    every alias of `DATABASES`, as `ATOMIC_REQUESTS` asks it (`alias in mark`). Every
    alias but the one `tests.queue.test_queue` adds as it is collected, after the
    URLconf's views were wrapped: a site's aliases are all in its settings at start."""
    marked = getattr(resolve(path).func, "_non_atomic_requests", set())
    assert set(connections) - {ELSEWHERE} <= marked
    assert "default" in marked


# --- (a) a park elsewhere succeeds while a web request settles rows ------------------


def drain_from_the_api(api: APIClient, admin: Client, key: bytes) -> None:
    assert api.post(f"{API}/queues/parks/drain/").status_code == 200


def drain_from_the_admin(api: APIClient, admin: Client, key: bytes) -> None:
    page = admin.post(ADMIN + "overview/drain/", {"queue": "parks", "limit": "5"}, follow=True)
    assert "1 delivered" in page.content.decode()


def retry_now_on_the_message_page(api: APIClient, admin: Client, key: bytes) -> None:
    page = admin.post(f"{ADMIN}{keys.to_text(key)}/retry/", follow=True)
    assert "1 delivered" in page.content.decode()


def retry_the_selection(api: APIClient, admin: Client, key: bytes) -> None:
    chosen = {"action": "retry_now", "_selected_action": [keys.to_text(key)], "index": "0"}
    page = admin.post(ADMIN, chosen, follow=True)
    assert "1 delivered" in page.content.decode()


@pytest.mark.slow
@pytest.mark.parametrize(
    "start",
    [drain_from_the_api, drain_from_the_admin, retry_now_on_the_message_page, retry_the_selection],
)
def test_a_park_in_another_process_succeeds_while_a_web_drains_handler_runs(
    api: APIClient,
    admin: Client,
    settings: Any,
    subprocess_env: dict[str, str],
    tmp_path: Path,
    start: Callable[[APIClient, Client, bytes], None],
) -> None:
    """The handler parks from a process whose SQLite busy timeout is 1 s: inside
    the request's transaction (its BEGIN IMMEDIATE) that park failed with
    "database is locked"."""
    settings.DEADLETTER_ADMIN_TIME_BUDGET = settings.DEADLETTER_API_TIME_BUDGET = 300
    park_args.update(env=subprocess_env, tmp=tmp_path, queue="elsewhere", subject="meanwhile")
    (key,) = park("retried", queue="parks")
    start(api, admin, key)
    assert parks == [None]
    assert parked("elsewhere") == ["meanwhile"]
    assert parked_messages("parks") == []


class DeleteProbe:
    """A database execute wrapper (Django's hook for instrumentation) that parks
    from another process as soon as a queue row's delete has committed: right
    after a DELETE run outside any transaction, or once the transaction it ran in
    commits (an archive entry and its delete are one). A park made while the
    request still held SQLite's write lock would be locked out. `deletes` is how
    many rows' deletes had run when it parked."""

    def __init__(self, env: dict[str, str], tmp: Path) -> None:
        self.env, self.tmp = env, tmp
        self.deletes = 0
        self.parked_after: int | None = None
        self.parks: list[str | None] = []

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        result = execute(sql, params, many, context)
        statement = sql.lstrip().upper()
        deletes_rows = "WHERE 0" not in statement  # not SQLite's write-lock statement
        if statement.startswith("DELETE") and QueuedMessage._meta.db_table in sql and deletes_rows:
            self.deletes += 1
            if connection.in_atomic_block:
                connection.on_commit(self.park)
            else:
                self.park()
        return result

    def park(self) -> None:
        if not self.parks:
            self.parked_after = self.deletes
            self.parks.append(web_harness.park_elsewhere(self.env, self.tmp, "elsewhere", "x"))


def park_expired(queue: str, count: int) -> None:
    """Rows parked 40 days ago, past the default 30-day age limit."""
    for i in range(count):
        park_aged(queue, days_ago=40, seq=i, subject="old")


def delete_all_matching(admin: Client) -> None:
    chosen = {
        "action": "delete_selected",
        "select_across": "1",
        "_selected_action": [
            keys.to_text(bytes(k)) for k in QueuedMessage.objects.values_list("key", flat=True)
        ],
        "index": "0",
        "post": "yes",
    }
    page = admin.post(ADMIN + "?queue=gone", chosen, follow=True)
    assert "Successfully deleted 3" in page.content.decode()


def purge_expired(admin: Client) -> None:
    page = admin.post(ADMIN + "overview/purge/", {"queue": "gone"}, follow=True)
    assert "Purged 3 expired message(s)." in page.content.decode()


@pytest.mark.slow
@pytest.mark.parametrize("run", [delete_all_matching, purge_expired])
def test_bulk_deletes_from_the_admin_commit_each_row_on_its_own(
    admin: Client,
    settings: Any,
    subprocess_env: dict[str, str],
    tmp_path: Path,
    run: Callable[[Client], None],
) -> None:
    settings.DEADLETTER_ADMIN_TIME_BUDGET = 300
    park_expired("gone", 3)
    probe = DeleteProbe(subprocess_env, tmp_path)
    with connection.execute_wrapper(probe):
        run(admin)
    assert probe.parks == [None]
    # Deletes of several statements (the purge's, one a row) commit one by one:
    # the park came between them, not after the request.
    assert probe.deletes == 1 or (probe.parked_after or probe.deletes) < probe.deletes
    assert parked("gone") == []


@pytest.mark.slow
def test_an_api_delete_commits_before_the_request_ends(
    api: APIClient, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    (key,) = park("one", queue="gone")
    probe = DeleteProbe(subprocess_env, tmp_path)
    with connection.execute_wrapper(probe):
        assert api.delete(f"{API}/messages/{keys.to_text(key)}/").status_code == 204
    assert probe.parks == [None]


# --- (b) a server killed mid-drain re-delivers only the message in hand --------------


@pytest.mark.slow
@pytest.mark.parametrize("edge", ["api", "admin"])
def test_a_server_killed_mid_drain_re_delivers_only_the_message_in_hand(
    user: User,
    settings: Any,
    subprocess_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: Any,
    edge: str,
) -> None:
    """A real server process (wsgiref over `project.wsgi`, ATOMIC_REQUESTS on)
    drains five messages; the fourth's handler delivers, then hangs, and the
    server is SIGKILLed. The three before it were settled one by one, so only
    the fourth is handed over again."""
    subjects = [f"m{i}" for i in range(1, 6)]
    park(*subjects)
    server = web_harness.Server(subprocess_env, tmp_path, DRAIN_HANG_ON="m4")
    try:
        if edge == "api":
            token = Token.objects.create(user=user).key
            server.post_in_background(lambda s: s.api_drain("q", 5, token))
        else:
            server.post_in_background(lambda s: s.admin_drain("q", 5))
        deadline = time.monotonic() + 120
        while len(web_harness.deliveries(server.record)) < 4:
            assert server.proc.poll() is None, server.log.read_text()
            assert not server.answers, (server.answers, server.log.read_text())
            assert time.monotonic() < deadline, server.log.read_text()
            time.sleep(0.01)
    finally:
        server.kill()
    assert parked("q") == ["m4", "m5"]
    settings.DEADLETTER_HANDLERS = {"q": "tests.drain.web_harness.recording_handler"}
    monkeypatch.setenv("DRAIN_RECORD", str(server.record))
    deadline = time.monotonic() + 60
    while parked("q"):  # on PostgreSQL the dead server's row lock lasts until its backend ends
        assert time.monotonic() < deadline
        drain.Drainer().run()
        time.sleep(0.05)
    delivered = Counter(web_harness.deliveries(server.record))
    assert set(delivered) == set(subjects)
    assert_only_messages_in_hand_were_delivered_twice(delivered, Counter(["m4"]))


# --- a hanging handler never holds a web request past its budget ---------------------


def hang_from_the_api(api: APIClient, admin: Client, key: bytes) -> str:
    response = api.post(f"{API}/queues/hangs/drain/")
    assert response.status_code == 200
    report = response.json()
    assert (report["failed"], report["stopped_by"]) == (1, "time budget")
    return str(report)


def hang_from_the_admin_drain(api: APIClient, admin: Client, key: bytes) -> str:
    page = admin.post(ADMIN + "overview/drain/", {"queue": "hangs", "limit": "5"}, follow=True)
    text = page.content.decode()
    assert "1 still failing" in text and "Stopped after the time budget" in text
    return text


def hang_from_retry_now(api: APIClient, admin: Client, key: bytes) -> str:
    text = admin.post(f"{ADMIN}{keys.to_text(key)}/retry/", follow=True).content.decode()
    assert "1 still failing" in text
    return text


def hang_from_the_retry_action(api: APIClient, admin: Client, key: bytes) -> str:
    chosen = {"action": "retry_now", "_selected_action": [keys.to_text(key)], "index": "0"}
    text = admin.post(ADMIN, chosen, follow=True).content.decode()
    assert "1 still failing" in text
    return text


@pytest.mark.parametrize(
    "start",
    [hang_from_the_api, hang_from_the_admin_drain, hang_from_retry_now, hang_from_the_retry_action],
)
def test_a_web_drain_returns_within_its_budget_when_the_handler_hangs(
    api: APIClient, admin: Client, settings: Any, start: Callable[..., str]
) -> None:
    """The handler would hang 60 s; the request answers after its 1 s budget
    (bounded here by half the hang), the message queued with the attempt counted."""
    settings.DEADLETTER_ADMIN_TIME_BUDGET = settings.DEADLETTER_API_TIME_BUDGET = 1
    (key,) = park("stuck", queue="hangs")
    started = time.monotonic()
    start(api, admin, key)
    assert time.monotonic() - started < 30
    assert in_hand.is_set() and not release.is_set()
    (msg,) = parked_messages("hangs")
    assert msg.extra["Attempts"] == 1
    assert re.fullmatch(
        r"HandlerTimeout: handler did not return within [0-9.]+ s", msg.extra["LastError"]
    )


def test_no_transaction_holds_the_row_once_an_api_drain_gave_up_on_its_handler(
    api: APIClient, settings: Any
) -> None:
    if connection.vendor == "sqlite":
        pytest.skip("a server claims rows in a transaction; SQLite holds none while handling")
    settings.DEADLETTER_API_TIME_BUDGET = 1
    (key,) = park("stuck", queue="hangs")
    hang_from_the_api(api, Client(), key)
    assert not release.is_set()  # the handler still runs
    assert other_sessions_holding_locks() == []
    assert _lock_now(key)


def _lock_now(key: bytes) -> bool:
    """Whether another connection can lock the row `key` at once."""
    got: list[bool] = []

    def lock() -> None:
        from django.db import transaction

        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(
                    raw_sql("SELECT {key} FROM {table} WHERE {key} = %s FOR UPDATE NOWAIT"),
                    [key],
                )
                got.append(cursor.fetchone() is not None)
        finally:
            connections.close_all()

    thread = threading.Thread(target=lock)
    thread.start()
    thread.join(30)
    return got == [True]


def test_past_the_bound_of_hung_handlers_a_web_drain_hands_nothing_over(
    api: APIClient, settings: Any, monkeypatch: Any
) -> None:
    """Each hung handler keeps a thread; past `MAX_HUNG_HANDLERS` a drain stops
    before handing a message over, its row untouched, until one returns."""
    monkeypatch.setattr(timeouts, "MAX_HUNG_HANDLERS", 1)
    settings.DEADLETTER_API_TIME_BUDGET = 1
    park("stuck", queue="hangs")
    hang_from_the_api(api, Client(), b"")
    assert drain.hung_handlers() == 1
    report = api.post(f"{API}/queues/hangs/drain/").json()
    assert (report["failed"], report["stopped_by"]) == (0, "hung handlers")
    assert parked_messages("hangs")[0].extra["Attempts"] == 1
    release.set()
    deadline = time.monotonic() + 30
    while drain.hung_handlers():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    report = api.post(f"{API}/queues/hangs/drain/").json()
    assert report["delivered"] == 1


def test_past_the_bound_retry_now_says_why_no_handler_was_started(
    api: APIClient, admin: Client, settings: Any, monkeypatch: Any
) -> None:
    monkeypatch.setattr(timeouts, "MAX_HUNG_HANDLERS", 1)
    settings.DEADLETTER_ADMIN_TIME_BUDGET = settings.DEADLETTER_API_TIME_BUDGET = 1
    (key,) = park("stuck", queue="hangs")
    hang_from_the_api(api, admin, key)
    text = admin.post(f"{ADMIN}{keys.to_text(key)}/retry/", follow=True).content.decode()
    assert "No handler was started after that: 1 handler(s)" in text
    assert parked_messages("hangs")[0].extra["Attempts"] == 1
