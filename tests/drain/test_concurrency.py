"""`concurrency`: several messages in hand at once in one process, each handler in
a thread, with every rule of the one delivery loop kept: at least once, every
outcome recorded, the rate, the breaker, the time limit, oldest first."""

from __future__ import annotations

import io
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, connections

from deadletter.drain import (
    DrainConfigError,
    Drainer,
    DrainOptions,
    DrainReport,
    Outcome,
    serve,
)
from deadletter.drain.concurrency import MAX_CONCURRENCY
from deadletter.models import ArchivedMessage
from deadletter.wire import codec
from deadletter.wire.messages import Message
from tests.drain.drain_harness import Drain, kill_once_recorded, recorded
from tests.factories import park, parked, parked_messages

pytestmark = pytest.mark.django_db(transaction=True)

HANDLER = "tests.drain.test_concurrency.handler"

# What `handler` does: each test sets `behaviour` (subject or "*" -> a callable).
behaviour: dict[str, Callable[[Message], Message | None]] = {}
entered: list[str] = []
threads: set[int] = set()
lock = threading.Lock()


def handler(msg: Message) -> Message | None:
    with lock:
        entered.append(msg.subject)
        threads.add(threading.get_ident())
    action = behaviour.get(msg.subject, behaviour.get("*"))
    return None if action is None else action(msg)


def pause(seconds: float) -> Callable[[Message], None]:
    def act(msg: Message) -> None:
        time.sleep(seconds)

    return act


def fail(msg: Message) -> None:
    raise ConnectionError(f"endpoint down for {msg.subject}")


def waits_for(event: threading.Event | threading.Barrier) -> Callable[[Message], None]:
    """A handler that returns once `event` is set (or the barrier's parties met)."""

    def act(msg: Message) -> None:
        if isinstance(event, threading.Barrier):
            event.wait()
        else:
            assert event.wait(30)

    return act


@pytest.fixture(autouse=True)
def handlers(settings: Any) -> Iterator[None]:
    settings.DEADLETTER_HANDLERS = {"q": HANDLER}
    behaviour.clear()
    entered.clear()
    threads.clear()
    yield
    behaviour.clear()


def drain(concurrency: int, **options: Any) -> DrainReport:
    return Drainer(["q"], DrainOptions(concurrency=concurrency, **options)).run()


def subjects(count: int) -> list[str]:
    return [f"m{i:03d}" for i in range(count)]


@pytest.mark.slow
def test_several_handlers_run_at_once_each_in_a_thread() -> None:
    """Four handlers meet at a barrier: only four messages in hand at once pass it."""
    park(*subjects(8))
    barrier = threading.Barrier(4, timeout=30)
    behaviour["*"] = waits_for(barrier)
    report = drain(4)
    assert report.delivered == 8 and report.failed == 0
    assert len(threads) == 4
    assert threading.get_ident() not in threads
    assert parked() == []


@pytest.mark.slow
def test_a_failing_message_stays_parked_with_its_attempt_and_the_rest_are_removed() -> None:
    names = subjects(30)
    park(*names)
    failing = set(names[::4])
    behaviour.update(dict.fromkeys(failing, fail))
    behaviour["*"] = pause(0.01)
    outcomes: list[Outcome] = []
    report = Drainer(
        ["q"], DrainOptions(concurrency=8), on_outcome=outcomes.append, log_progress=False
    ).run()
    assert sorted(entered) == names
    assert (report.delivered, report.failed) == (len(names) - len(failing), len(failing))
    assert sorted(outcomes) == sorted(
        report.delivered * [Outcome.DELIVERED] + report.failed * [Outcome.FAILED]
    )
    left = parked_messages()
    assert [m.subject for m in left] == sorted(failing)
    assert all(m.extra["Attempts"] == 1 for m in left)
    assert all(
        m.extra["LastError"] == f"ConnectionError: endpoint down for {m.subject}" for m in left
    )


@pytest.mark.slow
def test_the_rate_holds_across_the_threads() -> None:
    """N messages at R a second take at least (N - 1) / R seconds, however many threads."""
    park(*subjects(9))
    started = time.monotonic()
    report = drain(8, rate=40.0)
    assert time.monotonic() - started >= 8 / 40
    assert report.delivered == 9


@pytest.mark.slow
def test_the_breaker_stops_new_hand_overs_of_its_queue(settings: Any) -> None:
    """Breaker 2, three in hand at once: once two failures in a row are recorded no
    message is started, so at most 2 + (3 - 1) were handed over; the rest are untouched."""
    settings.DEADLETTER_HANDLERS = {"q": {"handler": HANDLER, "breaker": 2}}
    names = subjects(40)
    park(*names)
    behaviour["*"] = fail
    report = drain(3)
    assert report.paused == ["q"]
    assert 2 <= len(entered) <= 4
    assert report.failed == len(entered)
    left = {m.subject: m.extra.get("Attempts", 0) for m in parked_messages()}
    assert sorted(left) == names
    assert sorted(s for s, attempts in left.items() if attempts) == sorted(entered)


@pytest.mark.slow
def test_messages_are_started_oldest_first() -> None:
    """Three in hand, each held until the test lets it go: whichever ends, the next
    one started is the oldest not yet started."""
    names = subjects(7)
    park(*names)
    gates = {name: threading.Event() for name in names}
    behaviour.update({name: waits_for(gate) for name, gate in gates.items()})
    result: list[DrainReport] = []

    def run() -> None:
        try:
            result.append(drain(3))
        finally:
            connections.close_all()

    runner = threading.Thread(target=run)
    runner.start()
    try:
        wait_for(lambda: len(entered) == 3)
        assert sorted(entered) == names[:3]
        for release, count in (("m001", 4), ("m000", 5), ("m003", 6), ("m002", 7)):
            gates[release].set()
            wait_for(lambda: len(entered) == count)  # noqa: B023 (called in the loop)
            assert sorted(entered) == names[:count]
    finally:
        for gate in gates.values():
            gate.set()
        runner.join(30)
    assert result[0].delivered == 7
    assert parked() == []


@pytest.mark.slow
def test_a_handler_failing_in_one_thread_loses_no_other_outcome() -> None:
    names = subjects(12)
    park(*names)
    behaviour["*"] = pause(0.02)
    behaviour["m005"] = fail
    report = drain(6)
    assert (report.delivered, report.failed) == (11, 1)
    assert parked() == ["m005"]


@pytest.mark.slow
def test_a_base_exception_in_a_handler_passes_through_once_the_others_are_settled() -> None:
    """SystemExit in one handler leaves its row as it was; every other message handed
    over was settled and told to `on_outcome` before it passed through, and none
    was started after it."""
    names = subjects(10)
    park(*names)
    others_in_hand = threading.Event()

    def exits(msg: Message) -> None:
        others_in_hand.wait(30)
        raise SystemExit(3)

    def slow(msg: Message) -> None:
        if msg.subject == "m003":
            others_in_hand.set()
        time.sleep(0.05)

    behaviour["*"] = slow
    behaviour["m002"] = exits
    outcomes: list[Outcome] = []
    drainer = Drainer(["q"], DrainOptions(concurrency=4), on_outcome=outcomes.append)
    with pytest.raises(SystemExit):
        drainer.run()
    handed = set(entered) - {"m002"}
    assert {"m000", "m001", "m003"} <= handed
    assert outcomes == len(handed) * [Outcome.DELIVERED]
    assert parked() == sorted(set(names) - handed)
    assert "Attempts" not in parked_messages()[parked().index("m002")].extra


@pytest.mark.slow
def test_a_handler_past_its_time_limit_is_a_failed_attempt_and_the_others_deliver(
    settings: Any,
) -> None:
    settings.DEADLETTER_HANDLER_TIMEOUT = 0.3
    names = subjects(6)
    park(*names)
    hung = threading.Event()
    behaviour["*"] = pause(0.01)
    behaviour["m001"] = waits_for(hung)
    try:
        report = drain(3)
    finally:
        hung.set()
    assert (report.delivered, report.failed) == (5, 1)
    (left,) = parked_messages()
    assert left.subject == "m001"
    assert left.extra["LastError"].startswith("HandlerTimeout")


@pytest.mark.slow
def test_limit_counts_the_messages_started() -> None:
    park(*subjects(20))
    behaviour["*"] = pause(0.01)
    report = drain(8, limit=5)
    assert report.delivered == 5
    assert len(entered) == 5
    assert parked() == subjects(20)[5:]


@pytest.mark.slow
def test_workers_and_concurrency_together_deliver_each_message_once() -> None:
    if connection.vendor == "sqlite":
        pytest.skip("--workers needs a server")
    names = subjects(40)
    park(*names)
    report = drain(4, workers=2)
    assert report.delivered == 40
    assert parked() == []


@pytest.mark.slow
def test_the_service_hands_over_with_the_concurrency_its_options_ask() -> None:
    park(*subjects(6))
    behaviour["*"] = waits_for(threading.Barrier(3, timeout=30))
    done = serve(Drainer(["q"], DrainOptions(concurrency=3)), interval=0, passes=1)
    assert done.delivered == 6
    assert len(threads) == 3
    assert parked() == []


def test_concurrency_out_of_range_is_a_config_error() -> None:
    for bad in (0, -1, MAX_CONCURRENCY + 1):
        with pytest.raises(DrainConfigError, match="concurrency"):
            DrainOptions(concurrency=bad)


def test_the_command_refuses_concurrency_zero_and_too_many() -> None:
    park("a")
    with pytest.raises(CommandError, match="concurrency"):
        call_command("deadletter_drain", "--concurrency", "0")
    with pytest.raises(CommandError, match="concurrency"):
        call_command("deadletter_drain", "--concurrency", str(MAX_CONCURRENCY + 1))
    assert parked() == ["a"]


@pytest.mark.slow
def test_the_command_passes_concurrency_to_the_drain() -> None:
    park(*subjects(6))
    barrier = threading.Barrier(3, timeout=30)
    behaviour["*"] = waits_for(barrier)
    out = io.StringIO()
    call_command("deadletter_drain", "--concurrency", "3", "--no-progress", stdout=out)
    assert len(threads) == 3
    assert ", 3 at once" in out.getvalue().splitlines()[0]
    assert parked() == []


@pytest.mark.slow
@pytest.mark.loops
def test_sigkill_during_a_concurrent_drain_loses_nothing(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    """10 drains with four messages in hand, each killed with SIGKILL at a random
    point, then drains to the end: every message is recorded delivered or set aside
    as killed, the queue is empty,
    and a kill delivers again at most the four messages it caught in hand (their
    handlers had recorded them, their rows were not settled yet)."""
    seed = int(os.environ.get("DRAIN_CRASH_SEED", time.time_ns()))
    print(f"seed={seed}")  # shown with a failure
    rng = random.Random(seed)
    expected: set[str] = set()

    def top_up() -> None:
        names = [f"m{len(expected):04d}-{i:02d}" for i in range(40)]
        park(*names)
        expected.update(f"{name}:-" for name in names)

    top_up()
    record = tmp_path / "record.txt"
    kills = 0
    while kills < 10:
        if len(parked()) < 20:
            top_up()
        before = len(recorded(record))
        drain = Drain(subprocess_env, tmp_path, "--concurrency", "4", DRAIN_PAUSE="0.02")
        if not kill_once_recorded(drain, before + rng.randint(1, 12), 0.02, rng):
            continue  # the queue ran dry before this kill
        kills += 1
    for _ in range(10):
        if not parked():
            break
        assert Drain(subprocess_env, tmp_path, "--concurrency", "4").wait() == 0
    deliveries = Counter(recorded(record))
    assert parked() == []
    assert set(deliveries) | set_aside_as_killed("q") == expected, f"seed={seed}"
    assert sum(n - 1 for n in deliveries.values()) <= 4 * kills, deliveries.most_common(5)


def set_aside_as_killed(queue: str) -> set[str]:
    """What the poison rule archived as `killed`, as the record names it: a message a
    kill caught in hand `DEADLETTER_MAX_KILLS` times is set aside, not lost (a kill
    right after a drain starts can catch the head of the queue again and again)."""
    entries = ArchivedMessage.objects.filter(queue=queue, reason=ArchivedMessage.Reason.KILLED)
    return {f"{m.subject}:-" for entry in entries for m in codec.decode(bytes(entry.value))}


def wait_for(condition: Callable[[], bool], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)
