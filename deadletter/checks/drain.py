"""The checks of what a drain reads when it starts: each queue's handler and policy
(E002 to E005, E013 to E015, E020 to E022, E025, E029), the kills that set a message
aside (E030) and the time limits (E010, E011, E019)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.core import checks

from deadletter.checks.settings import problem_error
from deadletter.conf import conf
from deadletter.drain.handlers import handler_problems
from deadletter.drain.kills import max_kills_problem
from deadletter.drain.service import outage_limit_problem
from deadletter.drain.timeouts import handler_timeout_problem, seconds_of
from deadletter.queue.config import handlers_setting

_HANDLER_HINT = {
    "import": (
        "deadletter.E002",
        "Give the dotted path of a module-level callable that imports, "
        "e.g. 'myproject.handlers.post_webhook'.",
    ),
    "callable": (
        "deadletter.E003",
        "Point the path at a function or other callable handle(msg) -> Message | None.",
    ),
    "setting": (
        "deadletter.E004",
        "DEADLETTER_HANDLERS = {'queue-name': 'dotted.path.to.handler', ...}",
    ),
    "max_attempts": (
        "deadletter.E005",
        "Leave it unset to retry until the age limit, or set e.g. 10.",
    ),
    "keys": (
        "deadletter.E013",
        "A queue's policy is {'handler': 'dotted.path', 'max_attempts': 10, "
        "'backoff': [60, 3600], 'breaker': 5}; every key but 'handler' is optional.",
    ),
    "backoff": (
        "deadletter.E014",
        "Give [first_seconds, max_seconds], e.g. [60, 3600], or None for no wait.",
    ),
    "breaker": (
        "deadletter.E015",
        "Give the failed attempts in a row that pause a queue for the pass, e.g. 5, or None.",
    ),
    "archive_for": (
        "deadletter.E020",
        "Give how long the queue's archive keeps what left it, e.g. timedelta(days=90); "
        "None keeps for ever, timedelta(0) turns its archive off.",
    ),
    "max_age": (
        "deadletter.E021",
        "Give the queue's own age limit, e.g. timedelta(days=7), or leave it out for "
        "DEADLETTER_MAX_QUEUE_AGE.",
    ),
    "editable": (
        "deadletter.E022",
        "Give True to let operators edit the queue's messages, or leave it out (False).",
    ),
    "signature": (
        "deadletter.E029",
        "A handler takes handle(msg) or handle(msg, ctx) (ctx: the DeliveryContext); "
        "give any other parameter a default.",
    ),
    "alerts": (
        "deadletter.E025",
        "A queue's alerts dict overrides DEADLETTER_ALERTS key by key, e.g. "
        '{"depth": 50, "channels": ["mail_admins"]}; see docs/alerts.md.',
    ),
}


def check_handlers(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """Import every configured handler now, so a typo fails `manage.py check`
    and deploys, not the first drain after an incident; the same for the kill
    limit every drain reads when it starts."""
    errors: list[checks.CheckMessage] = []
    for problem in handler_problems(handlers_setting()):
        check_id, hint = _HANDLER_HINT[problem.kind]
        errors.append(checks.Error(f"{problem}.", hint=hint, id=check_id))
    errors += problem_error(
        max_kills_problem(conf.raw("MAX_KILLS")),
        hint="Leave it unset for 3, or give how many times a message's handler may kill "
        "its process before the message is archived as killed, e.g. DEADLETTER_MAX_KILLS = 2.",
        check_id="deadletter.E030",
    )
    return errors


def check_time_limits(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """The drain's time limits are read when a drain starts: a bad one would fail
    the first drain after an incident, or every drain from the web, not the deploy."""
    errors = problem_error(
        handler_timeout_problem(conf.HANDLER_TIMEOUT),
        hint="Leave it unset for no limit, or give the seconds a handler may "
        "take, e.g. DEADLETTER_HANDLER_TIMEOUT = 30.",
        check_id="deadletter.E010",
    )
    for name in ("ADMIN_TIME_BUDGET", "API_TIME_BUDGET"):
        value = conf.raw(name)
        seconds = seconds_of(value)
        if seconds is None or seconds < 0:
            errors.append(
                checks.Error(
                    f"DEADLETTER_{name} must be a number of seconds of at least 0, got {value!r}.",
                    hint=f"Leave it unset for its default, or set e.g. DEADLETTER_{name} = 5.",
                    id="deadletter.E011",
                )
            )
    errors += problem_error(
        outage_limit_problem(conf.raw("DATABASE_OUTAGE_LIMIT")),
        hint="Leave it unset for 5 minutes, or set e.g. "
        "DEADLETTER_DATABASE_OUTAGE_LIMIT = timedelta(minutes=10).",
        check_id="deadletter.E019",
    )
    return errors
