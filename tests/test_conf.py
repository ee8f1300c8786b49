from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from django.core.signals import setting_changed
from django.test import override_settings

import deadletter.conf
from deadletter.conf import DEFAULT_MAX_QUEUE_AGE, conf


def test_unset_settings_have_their_defaults() -> None:
    assert conf.MAX_QUEUE_AGE == DEFAULT_MAX_QUEUE_AGE
    assert conf.DATABASE == "default"
    assert conf.MAX_ATTEMPTS is None
    assert conf.API_QUEUES is None


def test_an_overridden_setting_is_read_at_once_and_forgotten_after() -> None:
    assert conf.MAX_QUEUE_AGE == DEFAULT_MAX_QUEUE_AGE  # now cached
    with override_settings(DEADLETTER_MAX_QUEUE_AGE=timedelta(hours=1)):
        assert timedelta(hours=1) == conf.MAX_QUEUE_AGE
        with override_settings(DEADLETTER_DATABASE="other"):
            assert conf.DATABASE == "other"
        assert conf.DATABASE == "default"
    assert conf.MAX_QUEUE_AGE == DEFAULT_MAX_QUEUE_AGE


def test_a_setting_set_by_the_settings_fixture_is_read_at_once(settings: Any) -> None:
    assert "q" not in conf.HANDLERS  # now cached
    settings.DEADLETTER_HANDLERS = {"q": "project.demo.handlers.webhook"}
    assert conf.HANDLERS == {"q": "project.demo.handlers.webhook"}


def test_a_deleted_setting_falls_back_to_its_default_once_django_says_it_changed(
    settings: Any,
) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "project.demo.handlers.webhook"}
    assert conf.HANDLERS == {"q": "project.demo.handlers.webhook"}
    del settings.DEADLETTER_HANDLERS
    setting_changed.send(sender=None, setting="DEADLETTER_HANDLERS", value=None, enter=True)
    assert conf.HANDLERS == {}


def test_a_cached_value_is_kept_until_its_own_setting_changes() -> None:
    with override_settings(DEADLETTER_MAX_ATTEMPTS=3):
        assert conf.MAX_ATTEMPTS == 3
        setting_changed.send(sender=None, setting="DEBUG", value=True, enter=True)
        assert conf.MAX_ATTEMPTS == 3
        with override_settings(DEADLETTER_MAX_ATTEMPTS=None):
            assert conf.MAX_ATTEMPTS is None
        assert conf.MAX_ATTEMPTS == 3


def test_conf_reads_no_private_attribute_of_django_settings() -> None:
    source = Path(deadletter.conf.__file__).read_text()
    assert "_wrapped" not in source
    assert "__dict__" not in source


def test_the_database_outage_limit_is_five_minutes_of_seconds_from_a_timedelta_or_a_number(
    settings: Any,
) -> None:
    assert conf.DATABASE_OUTAGE_LIMIT == 300.0
    settings.DEADLETTER_DATABASE_OUTAGE_LIMIT = timedelta(minutes=1, seconds=30)
    assert conf.DATABASE_OUTAGE_LIMIT == 90.0
    settings.DEADLETTER_DATABASE_OUTAGE_LIMIT = 12
    assert conf.DATABASE_OUTAGE_LIMIT == 12.0
