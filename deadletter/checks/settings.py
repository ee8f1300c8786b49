"""The checks of the `DEADLETTER_*` settings' values (E001, E009, E016 to E018, E023,
E024, E026 to E028), the alert rules among them."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from django.apps import AppConfig
from django.core import checks

from deadletter.checks.database import check_database
from deadletter.conf import ALERT_RULES, DEFAULT_API_THROTTLE_RATES, conf
from deadletter.queue import redaction
from deadletter.queue.config import (
    MAX_AGE_LIMIT,
    alerts_problems,
    archive_for_problem,
    queue_configs,
)


def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    errors: list[checks.CheckMessage] = []
    age = conf.MAX_QUEUE_AGE
    if not isinstance(age, timedelta) or not timedelta(0) < age <= MAX_QUEUE_AGE_LIMIT:
        errors.append(
            checks.Error(
                "DEADLETTER_MAX_QUEUE_AGE must be a positive timedelta of at most "
                f"{MAX_QUEUE_AGE_LIMIT.days:,} days (2**63 - 1 nanoseconds: the age rule "
                f"counts in 64-bit nanoseconds, as Go's time.Duration does), got {age!r}.",
                hint="For example DEADLETTER_MAX_QUEUE_AGE = timedelta(days=30).",
                id="deadletter.E001",
            )
        )
    errors += problem_error(
        archive_for_problem(conf.raw("ARCHIVE_FOR"), "DEADLETTER_ARCHIVE_FOR"),
        hint="Leave it unset for 30 days, or set e.g. DEADLETTER_ARCHIVE_FOR = "
        "timedelta(days=90); None keeps for ever, timedelta(0) turns the archive off.",
        check_id="deadletter.E023",
    )
    row_bytes = conf.raw("MAX_ROW_BYTES")
    if (
        not isinstance(row_bytes, int)
        or isinstance(row_bytes, bool)
        or not 0 < row_bytes <= MAX_ROW_BYTES_LIMIT
    ):
        errors.append(
            checks.Error(
                "DEADLETTER_MAX_ROW_BYTES must be a whole number of bytes from 1 to "
                f"{MAX_ROW_BYTES_LIMIT:,} (2**63 - 1: row sizes are compared in 64 bits), "
                f"got {row_bytes!r}.",
                hint="Leave it unset for 4 MiB, or set e.g. DEADLETTER_MAX_ROW_BYTES = 8 * 2**20.",
                id="deadletter.E018",
            )
        )
    errors.extend(check_database())
    errors.extend(
        checks.Error(
            f"{problem}.",
            hint="For example DEADLETTER_REDACT = {'billing.*': ['username', 'fields[0]', "
            "'card_number', 'CeleryKwargs.email']}, or the dotted path of a callable "
            "(queue, msg) -> names; see docs/redaction.md.",
            id="deadletter.E028",
        )
        for problem in redaction.setting_problems(conf.raw("REDACT"))
    )
    codes = conf.raw("EVENT_CODES")
    if not isinstance(codes, dict) or not all(
        isinstance(k, int) and not isinstance(k, bool) and isinstance(v, str)
        for k, v in codes.items()
    ):
        errors.append(
            checks.Error(
                f"DEADLETTER_EVENT_CODES must be a dict of int code to name, got {codes!r}.",
                hint="For example {0: 'ORDER_PLACED', 1: 'ORDER_SHIPPED'}, or "
                "deadletter.wire.messages.GO_EVENT_CODES for the Go program's names.",
                id="deadletter.E016",
            )
        )
    errors.extend(
        problem_error(
            throttle_rates_problem(conf.API_THROTTLE_RATES),
            hint='For example DEADLETTER_API_THROTTLE_RATES = {"failed_auth": "30/min", '
            '"user": None}; a rate is <count>/<s|sec|m|min|h|hour|d|day>, None is off.',
            check_id="deadletter.E009",
        )
    )
    errors.extend(
        problem_error(
            api_queues_problem(conf.raw("API_QUEUES")),
            hint='For example DEADLETTER_API_QUEUES = ["webhooks", "mail-*"] (shell-style '
            "patterns of the queue names the REST API may park into); None allows any.",
            check_id="deadletter.E017",
        )
    )
    return errors + _check_alerts()


ALERTS_HINT = (
    'For example DEADLETTER_ALERTS = {"new_cause": True, "depth": 1000, "oldest_age": '
    'timedelta(hours=6), "channels": ["mail_admins", {"webhook": "https://hooks.example.com/dl", '
    '"secret": "..."}]}; see docs/alerts.md.'
)


def _check_alerts() -> list[checks.CheckMessage]:
    """The alert rules (E024), the site's URL their links need (E026) and the digest's
    interval (E027): read by the evaluator on every drain pass, so a mistake would
    fail every pass, or send links nobody can open."""
    errors: list[checks.CheckMessage] = [
        checks.Error(f"{problem}.", hint=ALERTS_HINT, id="deadletter.E024")
        for problem in alerts_problems(conf.raw("ALERTS"))
    ]
    problem = site_url_problem(conf.raw("SITE_URL"), rules_on=any_alert_rule_on())
    errors += problem_error(
        problem,
        hint="Give the address the admin is reached at, e.g. DEADLETTER_SITE_URL = "
        '"https://ops.example.com" (an alert links to the admin\'s message list under it).',
        check_id="deadletter.E026",
    )
    digest = conf.raw("ALERT_DIGEST")
    if not isinstance(digest, timedelta) or digest <= timedelta(0):
        errors.append(
            checks.Error(
                f"DEADLETTER_ALERT_DIGEST must be a timedelta above 0, got {digest!r}.",
                hint="Leave it unset for 10 minutes, or set e.g. "
                "DEADLETTER_ALERT_DIGEST = timedelta(minutes=30).",
                id="deadletter.E027",
            )
        )
    return errors


def any_alert_rule_on() -> bool:
    """Whether `DEADLETTER_ALERTS` or any queue's `alerts` turns a rule on."""
    specs = [conf.raw("ALERTS"), *(config.alerts for config in queue_configs())]
    return any(
        isinstance(spec, Mapping)
        and any(spec.get(rule) not in (None, False) for rule in ALERT_RULES)
        for spec in specs
    )


def site_url_problem(value: Any, *, rules_on: bool) -> str | None:
    """What is wrong with `DEADLETTER_SITE_URL` (E026), or None."""
    if value is None:
        if rules_on:
            return (
                "DEADLETTER_SITE_URL is unset, but an alert rule is on and every alert "
                "carries an absolute link to the admin"
            )
        return None
    parts = urlsplit(value) if isinstance(value, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        return f"DEADLETTER_SITE_URL must be an absolute http(s) URL, got {value!r}"
    if parts.query or parts.fragment:
        return f"DEADLETTER_SITE_URL must be a base URL without query or fragment, got {value!r}"
    return None


def api_queues_problem(value: Any) -> str | None:
    """What is wrong with `DEADLETTER_API_QUEUES` (E017), or None."""
    if value is None:
        return None
    if not isinstance(value, list | tuple) or not all(isinstance(p, str) and p for p in value):
        return (
            "DEADLETTER_API_QUEUES must be None or a list of non-empty shell-style "
            f"patterns, got {value!r}"
        )
    return None


# The largest limits a signed 64-bit count holds (Go's time.Duration, the C speed-up's
# comparisons): beyond them a value is a mistake, not a limit.
MAX_QUEUE_AGE_LIMIT = MAX_AGE_LIMIT
MAX_ROW_BYTES_LIMIT = 2**63 - 1


def problem_error(problem: str | None, *, hint: str, check_id: str) -> list[checks.CheckMessage]:
    """The error for a setting's problem text (the one the drain refuses on), or none."""
    if problem is None:
        return []
    return [checks.Error(f"{problem}.", hint=hint, id=check_id)]


RATE = re.compile(r"[1-9][0-9]*/(s|sec|m|min|h|hour|d|day)")


def throttle_rates_problem(value: Any) -> str | None:
    """What is wrong with `DEADLETTER_API_THROTTLE_RATES` (E009), or None: DRF
    reads a rate only when a request comes, and a bad one fails every request."""
    name = "DEADLETTER_API_THROTTLE_RATES"
    if not isinstance(value, dict):
        return f"{name} must be a dict of scope -> rate, got {value!r}"
    for scope, rate in value.items():
        if scope not in DEFAULT_API_THROTTLE_RATES:
            known = ", ".join(repr(s) for s in DEFAULT_API_THROTTLE_RATES)
            return f"{name} has the scope {scope!r}; the scopes are {known}"
        if rate is not None and not (isinstance(rate, str) and RATE.fullmatch(rate)):
            return f"{name}[{scope!r}] must be None or a rate such as '30/min', got {rate!r}"
    return None
