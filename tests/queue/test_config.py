"""deadletter.queue.config: a queue's settings read once per settings change, each
key resolved against its default, a key the checks refuse read as its default."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from deadletter.conf import DEFAULT_MAX_QUEUE_AGE
from deadletter.queue.config import configured_queues, queue_config, queue_configs

OK = "tests.factories.ok_handler"


def test_a_bare_path_takes_every_default(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": OK}
    settings.DEADLETTER_MAX_ATTEMPTS = 4
    settings.DEADLETTER_BACKOFF = [1, 8]
    config = queue_config("q")
    assert config is not None
    assert (config.handler, config.max_attempts, config.backoff) == (OK, 4, (1.0, 8.0))
    assert config.max_age == DEFAULT_MAX_QUEUE_AGE
    assert not config.own_policy and not config.editable and config.problems == ()


def test_a_dict_overrides_the_defaults_key_by_key(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {
        "q": {"handler": OK, "max_age": timedelta(days=2), "editable": True, "alerts": {"depth": 3}}
    }
    config = queue_config("q")
    assert config is not None and config.own_policy
    assert (config.max_age, config.editable, config.alerts) == (
        timedelta(days=2),
        True,
        {"depth": 3},
    )


def test_a_refused_key_reads_as_its_default_and_says_why(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": {"handler": OK, "backoff": [5, 1], "breaker": 2}}
    settings.DEADLETTER_BACKOFF = None
    config = queue_config("q")
    assert config is not None
    assert (config.backoff, config.breaker) == (None, 2)
    assert [p.key for p in config.problems] == ["backoff"]


def test_a_settings_change_is_read_again(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": OK}
    assert queue_config("q") is not None and queue_config("other") is None
    settings.DEADLETTER_HANDLERS = {"other": OK}
    assert queue_config("q") is None
    assert configured_queues() == ("other",)
    assert [c.name for c in queue_configs()] == ["other"]


def test_a_setting_that_is_no_dict_names_no_queue(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = ["q"]
    assert configured_queues() == () and queue_config("q") is None
