from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.test import override_settings

from deadletter.conf import DEFAULT_MAX_QUEUE_AGE, conf


def test_unset_settings_have_their_defaults() -> None:
    assert conf.MAX_QUEUE_AGE == DEFAULT_MAX_QUEUE_AGE
    assert conf.DATABASE == "default"
    assert conf.MAX_ATTEMPTS is None


def test_an_overridden_setting_is_read_at_once_and_forgotten_after() -> None:
    assert conf.MAX_QUEUE_AGE == DEFAULT_MAX_QUEUE_AGE  # now cached
    with override_settings(DEADLETTER_MAX_QUEUE_AGE=timedelta(hours=1)):
        assert timedelta(hours=1) == conf.MAX_QUEUE_AGE
        with override_settings(DEADLETTER_DATABASE="other"):
            assert conf.DATABASE == "other"
        assert conf.DATABASE == "default"
    assert conf.MAX_QUEUE_AGE == DEFAULT_MAX_QUEUE_AGE


def test_a_setting_deleted_by_a_test_falls_back_to_its_default(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "project.demo.handlers.webhook"}
    assert conf.HANDLERS == {"q": "project.demo.handlers.webhook"}
    del settings.DEADLETTER_HANDLERS
    assert conf.HANDLERS == {}
