"""A queue's policy in DEADLETTER_HANDLERS: a dotted path means what it always did,
a dict adds the queue's own attempts limit, backoff and breaker, and every key is
checked with its own id before any row is touched."""

from __future__ import annotations

import random
from typing import Any

import pytest
from django.core.signals import setting_changed

from deadletter.checks import check_handlers
from deadletter.drain import DrainConfigError, Drainer, Policy, load_handlers
from deadletter.drain.policy import JITTER

OK = "tests.factories.ok_handler"


def ids(messages: list[Any]) -> list[str]:
    return [m.id for m in messages]


def test_a_dotted_path_is_the_handler_with_the_global_defaults(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": OK}
    loaded = load_handlers()["q"]  # beside the built-in deadletter.alerts
    assert loaded.policy == Policy(path=OK)
    settings.DEADLETTER_MAX_ATTEMPTS = 7
    settings.DEADLETTER_BACKOFF = [30, 600]
    settings.DEADLETTER_BREAKER = 4
    loaded = load_handlers()["q"]
    assert loaded.policy == Policy(path=OK, max_attempts=7, backoff=(30.0, 600.0), breaker=4)


def test_a_dict_sets_each_limit_for_its_queue_and_leaves_the_rest_to_the_defaults(
    settings: Any,
) -> None:
    settings.DEADLETTER_MAX_ATTEMPTS = 7
    settings.DEADLETTER_BREAKER = 4
    settings.DEADLETTER_HANDLERS = {
        "hooks": {"handler": OK, "backoff": [60, 3600], "max_attempts": None},
        "mail": OK,
    }
    loaded = load_handlers()
    assert loaded["hooks"].policy == Policy(
        OK, max_attempts=None, backoff=(60.0, 3600.0), breaker=4
    )
    assert loaded["mail"].policy == Policy(OK, max_attempts=7, backoff=None, breaker=4)
    assert loaded["hooks"].path == OK and callable(loaded["hooks"].handler)


def test_nothing_set_means_no_backoff_and_no_breaker(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": {"handler": OK}}
    loaded = load_handlers()["q"]
    assert (loaded.policy.backoff, loaded.policy.breaker) == (None, None)
    assert loaded.policy.wait_seconds(3) is None


def test_the_wait_doubles_from_first_up_to_max_within_the_jitter() -> None:
    policy = Policy(OK, backoff=(10.0, 100.0))
    rng = random.Random(7)
    for attempts, wait in [(1, 10), (2, 20), (3, 40), (4, 80), (5, 100), (6, 100), (500, 100)]:
        for _ in range(50):
            got = policy.wait_seconds(attempts, rng)
            assert got is not None
            assert wait * (1 - JITTER) <= got <= wait * (1 + JITTER), (attempts, got)


BAD = [
    ({"q": {"handler": OK, "colour": "red"}}, "deadletter.E013", "unknown key 'colour'"),
    ({"q": {"backoff": [1, 2]}}, "deadletter.E013", "needs a 'handler'"),
    ({"q": {"handler": OK, "backoff": [0, 10]}}, "deadletter.E014", "0 < first_seconds"),
    ({"q": {"handler": OK, "backoff": [60, 30]}}, "deadletter.E014", "first_seconds <= max"),
    ({"q": {"handler": OK, "backoff": 60}}, "deadletter.E014", "[first_seconds, max_seconds]"),
    ({"q": {"handler": OK, "backoff": [1, float("inf")]}}, "deadletter.E014", "max_seconds"),
    ({"q": {"handler": OK, "breaker": 0}}, "deadletter.E015", "at least 1"),
    ({"q": {"handler": OK, "breaker": True}}, "deadletter.E015", "at least 1"),
    ({"q": {"handler": OK, "max_attempts": "3"}}, "deadletter.E005", "['max_attempts']"),
    ({"q": {"handler": "no.such.module"}}, "deadletter.E002", "does not import"),
    ({"q": {"handler": 3}}, "deadletter.E004", "dotted path string"),
]


@pytest.mark.parametrize(("handlers", "check_id", "text"), BAD)
def test_each_bad_policy_key_is_its_own_check_and_the_drain_refuses_it(
    settings: Any, handlers: Any, check_id: str, text: str
) -> None:
    settings.DEADLETTER_HANDLERS = handlers
    (error,) = check_handlers()
    assert error.id == check_id
    assert text in error.msg
    with pytest.raises(DrainConfigError, match="DEADLETTER_HANDLERS|handler"):
        Drainer()


@pytest.mark.parametrize(
    ("name", "value", "check_id"),
    [
        ("DEADLETTER_BACKOFF", [5], "deadletter.E014"),
        ("DEADLETTER_BACKOFF", ["1", "2"], "deadletter.E014"),
        ("DEADLETTER_BREAKER", -1, "deadletter.E015"),
        ("DEADLETTER_MAX_ATTEMPTS", 0, "deadletter.E005"),
    ],
)
def test_the_global_defaults_are_checked_too(
    settings: Any, name: str, value: Any, check_id: str
) -> None:
    settings.DEADLETTER_HANDLERS = {"q": OK}
    setattr(settings, name, value)
    (error,) = check_handlers()
    assert error.id == check_id and name in error.msg
    with pytest.raises(DrainConfigError, match=name):
        Drainer()


def test_unset_defaults_are_valid(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": OK}
    for name in ("DEADLETTER_BACKOFF", "DEADLETTER_BREAKER"):
        if hasattr(settings, name):
            delattr(settings, name)
            setting_changed.send(sender=None, setting=name, value=None, enter=False)
    assert check_handlers() == []
