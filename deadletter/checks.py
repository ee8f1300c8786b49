"""System checks (`manage.py check`); every id is stable and never reused."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from django.apps import AppConfig
from django.core import checks
from django.urls import URLResolver

from deadletter.conf import ALERT_RULES, DEFAULT_API_THROTTLE_RATES, conf
from deadletter.drain.handlers import handler_problems
from deadletter.drain.policy import alerts_problems
from deadletter.drain.service import outage_limit_problem
from deadletter.drain.timeouts import handler_timeout_problem, seconds_of
from deadletter.queue import limits, redaction
from deadletter.store import sql


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
    errors += _problem_error(
        limits.archive_for_problem(conf.raw("ARCHIVE_FOR"), "DEADLETTER_ARCHIVE_FOR"),
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
    errors.extend(_check_database())
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
        _problem_error(
            throttle_rates_problem(conf.API_THROTTLE_RATES),
            hint='For example DEADLETTER_API_THROTTLE_RATES = {"failed_auth": "30/min", '
            '"user": None}; a rate is <count>/<s|sec|m|min|h|hour|d|day>, None is off.',
            check_id="deadletter.E009",
        )
    )
    errors.extend(
        _problem_error(
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
    errors += _problem_error(
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
    specs = [conf.raw("ALERTS")]
    handlers = conf.raw("HANDLERS")
    if isinstance(handlers, dict):
        specs += [v.get("alerts") for v in handlers.values() if isinstance(v, dict)]
    return any(
        isinstance(spec, dict) and any(spec.get(rule) not in (None, False) for rule in ALERT_RULES)
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
MAX_QUEUE_AGE_LIMIT = limits.MAX_AGE_LIMIT
MAX_ROW_BYTES_LIMIT = 2**63 - 1


def _problem_error(problem: str | None, *, hint: str, check_id: str) -> list[checks.CheckMessage]:
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


SUPPORTED_VENDORS = ("sqlite", "postgresql", "mysql")


def _check_database() -> list[checks.CheckMessage]:
    """The queue needs a binary primary key in byte order and row locks that skip
    a locked row: SQLite, PostgreSQL and MySQL/MariaDB have both; others were never tried."""
    from django.db import connections

    alias = conf.DATABASE
    if alias not in connections.settings:
        return [
            checks.Error(
                f"DEADLETTER_DATABASE names {alias!r}, which is not in DATABASES.",
                hint="Use one of: " + ", ".join(repr(a) for a in connections.settings),
                id="deadletter.E006",
            )
        ]
    vendor = connections[alias].vendor
    if vendor not in SUPPORTED_VENDORS:
        return [
            checks.Error(
                f"The queue database {alias!r} is {vendor}; deadletter runs on SQLite, "
                "PostgreSQL and MySQL/MariaDB only.",
                hint="Route the queue to one of those with DEADLETTER_DATABASE.",
                id="deadletter.E007",
            )
        ]
    return []


SQLITE_OPTIONS = (
    '{"init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", '
    '"transaction_mode": "IMMEDIATE", "timeout": 30}'
)


def _sqlite_file(settings_dict: dict[str, Any]) -> str | None:
    name = str(settings_dict.get("NAME") or "")
    if not name or name == ":memory:" or "mode=memory" in name:
        return None
    return os.path.realpath(name)


def _check_sqlite(alias: str, databases: dict[str, dict[str, Any]]) -> list[checks.CheckMessage]:
    """Read from the settings alone (no connection): WAL set on connect, and no
    other alias on the same file."""
    settings_dict = databases[alias]
    path = _sqlite_file(settings_dict)
    if path is None:
        return []  # in memory: no journal to speak of, no other connection
    found: list[checks.CheckMessage] = []
    init_command = str((settings_dict.get("OPTIONS") or {}).get("init_command") or "")
    if not re.search(r"journal_mode\s*=\s*'?wal\b", init_command, re.IGNORECASE):
        found.append(
            checks.Warning(
                f"The queue database {alias!r} is SQLite without WAL: every store waits "
                "for a full journal sync (about 12 ms against 30 us with WAL), and readers "
                "block the writer.",
                hint=f"Set DATABASES[{alias!r}]['OPTIONS'] = {SQLITE_OPTIONS}.",
                id="deadletter.W001",
            )
        )
    for other, other_dict in databases.items():
        same_file = str(other_dict.get("ENGINE", "")).endswith("sqlite3") and (
            _sqlite_file(other_dict) == path
        )
        if other != alias and same_file:
            found.append(
                checks.Warning(
                    f"DEADLETTER_DATABASE {alias!r} and the alias {other!r} are the same "
                    "SQLite file: a message parked inside a transaction on "
                    f"{other!r} waits for that transaction's write lock and fails "
                    "with 'database is locked'.",
                    hint="Give the queue a SQLite file of its own, or use one alias for "
                    f"both (DEADLETTER_DATABASE = {other!r}): a store inside a transaction "
                    "on the queue's own alias is written the moment the transaction ends.",
                    id="deadletter.W002",
                )
            )
    return found


def check_api_mount(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """The API's views are Django REST framework views: mounted without the app
    installed, a browser gets a 500 (its templates are missing)."""
    from django.apps import apps

    if apps.is_installed("rest_framework"):
        return []
    if not _api_mounted():
        return []
    return [
        checks.Error(
            "deadletter.api.urls is mounted in ROOT_URLCONF but 'rest_framework' is not "
            "in INSTALLED_APPS.",
            hint="Add 'rest_framework' to INSTALLED_APPS (pip install djangorestframework), "
            "or remove the include of deadletter.api.urls.",
            id="deadletter.E008",
        )
    ]


def _api_mounted() -> bool:
    """Whether ROOT_URLCONF includes deadletter.api.urls; a URLconf that does not
    load is Django's own check to report, so it counts as not mounted here."""
    try:
        from django.urls import get_resolver

        return _includes(get_resolver().url_patterns, "deadletter.api.urls")
    except Exception:
        return False


PROXY_SETTINGS = ("SECURE_PROXY_SSL_HEADER", "USE_X_FORWARDED_HOST", "USE_X_FORWARDED_PORT")


def check_api_proxy(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """The API's failed-authentication throttle counts per client address, DRF's
    `get_ident`: the last `NUM_PROXIES` entries of X-Forwarded-For, and without
    `NUM_PROXIES` the whole header as the client wrote it. A site that trusts a
    proxy's headers is behind one, where that header is how clients get a new
    address on every request."""
    from django.conf import settings

    trusted = [name for name in PROXY_SETTINGS if getattr(settings, name, None)]
    drf = getattr(settings, "REST_FRAMEWORK", None) or {}
    rates = conf.API_THROTTLE_RATES
    if (
        not trusted
        or drf.get("NUM_PROXIES") is not None
        or not isinstance(rates, dict)
        or rates.get("failed_auth") is None
    ):
        return []
    if not _api_mounted():
        return []
    return [
        checks.Warning(
            f"The site trusts a proxy's headers ({', '.join(trusted)}) but "
            "REST_FRAMEWORK['NUM_PROXIES'] is unset: the API's failed-authentication "
            "throttle then counts failures per X-Forwarded-For header as the client sent "
            "it, so a client writing a new one on each request is never slowed.",
            hint="Set REST_FRAMEWORK['NUM_PROXIES'] to the number of proxies in front of "
            "the site that append to X-Forwarded-For (1 for one nginx or load balancer), "
            "or 0 if none does.",
            id="deadletter.W004",
        )
    ]


def _includes(patterns: Any, module: str) -> bool:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            urlconf = pattern.urlconf_name
            name = urlconf if isinstance(urlconf, str) else getattr(urlconf, "__name__", None)
            if name == module or _includes(pattern.url_patterns, module):
                return True
    return False


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
    and deploys, not the first drain after an incident."""
    errors: list[checks.CheckMessage] = []
    for problem in handler_problems(conf.HANDLERS):
        check_id, hint = _HANDLER_HINT[problem.kind]
        errors.append(checks.Error(f"{problem}.", hint=hint, id=check_id))
    return errors


def check_time_limits(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """The drain's time limits are read when a drain starts: a bad one would fail
    the first drain after an incident, or every drain from the web, not the deploy."""
    errors = _problem_error(
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
    errors += _problem_error(
        outage_limit_problem(conf.raw("DATABASE_OUTAGE_LIMIT")),
        hint="Leave it unset for 5 minutes, or set e.g. "
        "DEADLETTER_DATABASE_OUTAGE_LIMIT = timedelta(minutes=10).",
        check_id="deadletter.E019",
    )
    return errors


def check_database_server(
    app_configs: Sequence[AppConfig] | None = None,
    databases: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[checks.CheckMessage]:
    """The queue database itself (run by `migrate` and `check --database`, as
    Django's own database checks are, not by every command): a SQLite file in WAL
    and of its own (W001, W002); drain workers on a shared server claim rows with
    `FOR UPDATE SKIP LOCKED`, which MariaDB has from 10.6 and MySQL from 8.0.1; and
    on MySQL/MariaDB a row as large as `DEADLETTER_MAX_ROW_BYTES` must fit in one
    packet."""
    from django.db import connections

    alias = conf.DATABASE
    if not databases or alias not in databases or alias not in connections.settings:
        return []
    connection = connections[alias]
    if connection.vendor == "sqlite":
        return _check_sqlite(alias, connections.settings)
    found: list[checks.CheckMessage] = []
    if connection.vendor == "mysql":
        found += _check_packet(alias, sql.max_packet(connection))
    if connection.features.has_select_for_update_skip_locked:
        return found
    server = connection.display_name
    version = ".".join(str(part) for part in getattr(connection, "mysql_version", ()))
    return found + [
        checks.Error(
            f"The queue database {alias!r} ({server} {version}) cannot skip locked rows "
            "(SELECT ... FOR UPDATE SKIP LOCKED), which drain workers need so that no two "
            "hand the same message to a handler.",
            hint="Upgrade to MariaDB 10.6 / MySQL 8.0.1 or later, or use PostgreSQL or SQLite.",
            id="deadletter.E012",
        )
    ]


def _check_packet(alias: str, packet: int) -> list[checks.CheckMessage]:
    """A row is sent as a literal in which a byte may take two (mysqlclient escapes
    NUL, quotes, backslashes and newlines), so the packet needs twice the row limit."""
    needed = 2 * conf.MAX_ROW_BYTES + 2**16
    if packet >= needed:
        return []
    return [
        checks.Warning(
            f"The queue database {alias!r} takes statements of at most {packet:,} bytes "
            f"(max_allowed_packet), less than the {needed:,} a row of DEADLETTER_MAX_ROW_BYTES "
            f"({conf.MAX_ROW_BYTES:,}) may need: such a message would be refused at the store.",
            hint=f"Set max_allowed_packet to at least {needed:,} on the server, or lower "
            "DEADLETTER_MAX_ROW_BYTES.",
            id="deadletter.W003",
        )
    ]


def register() -> None:
    """Register the app's system checks; called from `DeadletterConfig.ready()`, so
    importing this module has no side effect (Django keeps a set: twice is once)."""
    checks.register(check_settings, "deadletter")
    checks.register(check_api_mount, "deadletter", checks.Tags.urls)
    checks.register(check_api_proxy, "deadletter", checks.Tags.urls, checks.Tags.security)
    checks.register(check_handlers, "deadletter")
    checks.register(check_time_limits, "deadletter")
    checks.register(check_database_server, "deadletter", checks.Tags.database)
