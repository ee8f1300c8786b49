"""The app's own queues (`drain.handlers.BUILTIN_HANDLERS`): drained without the
project naming them, a project's entry wins, and `manage.py check` has nothing to
say about them."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from deadletter.checks import check_handlers
from deadletter.drain import load_handlers
from deadletter.drain.handlers import BUILTIN_HANDLERS, configured_handlers
from deadletter.reports.alerts import redeliver
from deadletter.reports.alerts.channels import QUEUE

pytestmark = pytest.mark.django_db

OWN = "tests.factories.ok_handler"


def test_the_alerts_queue_is_drained_beside_the_projects_queues(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": OWN}
    loaded = load_handlers()
    assert list(loaded) == ["q", QUEUE]
    assert loaded[QUEUE].handler is redeliver.handle
    assert loaded[QUEUE].path == BUILTIN_HANDLERS[QUEUE]


def test_a_projects_own_entry_for_the_queue_wins(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {QUEUE: {"handler": OWN, "max_attempts": 3}, "q": OWN}
    loaded = load_handlers()
    assert list(loaded) == [QUEUE, "q"]
    assert loaded[QUEUE].path == OWN
    assert loaded[QUEUE].policy.max_attempts == 3


def test_with_no_handler_of_its_own_only_a_named_builtin_queue_is_drained(
    settings: Any,
) -> None:
    settings.DEADLETTER_HANDLERS = {}
    assert load_handlers() == {}
    assert list(load_handlers([QUEUE])) == [QUEUE]
    assert configured_handlers() == {}


def test_a_site_that_alerts_retries_its_alerts_with_no_handler_of_its_own(
    settings: Any,
) -> None:
    settings.DEADLETTER_HANDLERS = {}
    settings.DEADLETTER_ALERTS = {"depth": 10, "channels": ["mail_admins"]}
    assert list(load_handlers()) == [QUEUE]


def test_check_says_nothing_of_the_builtin_queue(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": OWN}
    assert check_handlers() == []
    out = StringIO()
    call_command("check", "--tag", "deadletter", stdout=out)
    assert QUEUE not in out.getvalue()
