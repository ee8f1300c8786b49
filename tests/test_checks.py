"""System checks: each id has its own test, and `manage.py check` reports them."""

from __future__ import annotations

import ast
import contextlib
import copy
import io
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from deadletter.checks import (
    check_api_mount,
    check_api_proxy,
    check_handlers,
    check_settings,
    check_time_limits,
)
from tests.factories import REPO, manage_py

not_callable = 42


def ids(errors: list[Any]) -> list[str]:
    return [e.id for e in errors]


def test_the_demo_settings_pass_every_check() -> None:
    assert check_settings() + check_handlers() == []


def test_e001_max_queue_age_must_be_a_positive_timedelta(settings: Any) -> None:
    settings.DEADLETTER_MAX_QUEUE_AGE = timedelta(0)
    assert ids(check_settings()) == ["deadletter.E001"]


@pytest.mark.parametrize("age", [timedelta(days=106_752), timedelta(days=127_500), timedelta.max])
def test_e001_max_queue_age_past_64_bit_nanoseconds_names_the_largest_allowed(
    settings: Any, age: timedelta
) -> None:
    settings.DEADLETTER_MAX_QUEUE_AGE = age
    (error,) = check_settings()
    assert error.id == "deadletter.E001"
    assert "at most 106,751 days" in error.msg


def test_e001_the_largest_max_queue_age_passes(settings: Any) -> None:
    settings.DEADLETTER_MAX_QUEUE_AGE = timedelta(microseconds=(2**63 - 1) // 1000)
    assert check_settings() == []


@pytest.mark.parametrize("limit", [2**63, 0, -1, "4MB", 4.0 * 2**20, True])
def test_e018_max_row_bytes_must_be_a_whole_number_from_1_to_2_63_minus_1(
    settings: Any, limit: Any
) -> None:
    settings.DEADLETTER_MAX_ROW_BYTES = limit
    (error,) = check_settings()
    assert error.id == "deadletter.E018"
    assert "9,223,372,036,854,775,807" in error.msg


@pytest.mark.parametrize("limit", [1, 2**63 - 1])
def test_e018_row_limits_within_64_bits_pass(settings: Any, limit: int) -> None:
    settings.DEADLETTER_MAX_ROW_BYTES = limit
    assert check_settings() == []


def test_e002_a_handler_path_that_does_not_import(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "project.demo.handlers.no_such_handler"}
    (error,) = check_handlers()
    assert error.id == "deadletter.E002"
    assert "'q'" in error.msg
    assert "project.demo.handlers.no_such_handler" in error.msg
    assert error.hint


def test_e003_a_handler_that_is_not_callable(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.test_checks.not_callable"}
    (error,) = check_handlers()
    assert error.id == "deadletter.E003"
    assert "not callable" in error.msg


@pytest.mark.parametrize(
    "handlers",
    [["project.demo.handlers.log_only"], {"": "project.demo.handlers.log_only"}, {"q": 7}],
)
def test_e004_handlers_setting_of_the_wrong_shape(settings: Any, handlers: Any) -> None:
    settings.DEADLETTER_HANDLERS = handlers
    assert ids(check_handlers()) == ["deadletter.E004"]


@pytest.mark.parametrize("attempts", [0, -1, "3", True])
def test_e005_max_attempts_must_be_none_or_a_positive_int(settings: Any, attempts: Any) -> None:
    settings.DEADLETTER_MAX_ATTEMPTS = attempts
    assert ids(check_handlers()) == ["deadletter.E005"]


@pytest.mark.parametrize("kills", [0, -1, 21, "3", True, None, 2.5])
def test_e030_max_kills_must_be_an_int_from_1_to_the_kept_history(
    settings: Any, kills: Any
) -> None:
    settings.DEADLETTER_MAX_KILLS = kills
    assert ids(check_handlers()) == ["deadletter.E030"]


@pytest.mark.parametrize("kills", [1, 3, 20])
def test_e030_a_kill_limit_from_1_to_20_passes(settings: Any, kills: int) -> None:
    settings.DEADLETTER_MAX_KILLS = kills
    assert check_handlers() == []


def test_every_broken_handler_is_reported(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {
        "a": "nowhere.handler",
        "b": "tests.test_checks.not_callable",
        "c": "project.demo.handlers.log_only",
    }
    assert ids(check_handlers()) == ["deadletter.E002", "deadletter.E003"]


def test_manage_py_check_reports_a_handler_that_does_not_import(tmp_path: Path) -> None:
    (tmp_path / "broken_handler_settings.py").write_text(
        "from project.settings import *  # noqa: F403\n"
        "DEADLETTER_HANDLERS = {'q': 'project.demo.handlers.no_such_handler'}\n"
    )
    result = manage_py(
        "check",
        "--settings",
        "broken_handler_settings",
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{REPO}:{tmp_path}"},
        timeout=60,
    )
    assert result.returncode == 1
    assert "deadletter.E002" in result.stderr
    assert "no_such_handler" in result.stderr


def test_e006_the_queue_database_alias_must_exist(settings: Any) -> None:
    settings.DEADLETTER_DATABASE = "nowhere"
    assert ids(check_settings()) == ["deadletter.E006"]


def test_e007_the_queue_database_must_be_sqlite_postgresql_or_mysql(monkeypatch: Any) -> None:
    from django.db import connection

    monkeypatch.setattr(connection, "vendor", "oracle")
    (error,) = check_settings()
    assert error.id == "deadletter.E007"
    assert "oracle" in error.msg


@pytest.mark.django_db
def test_e012_a_server_that_cannot_skip_locked_rows_is_refused(monkeypatch: Any) -> None:
    from django.db import connection

    from deadletter.checks import check_database_server

    assert check_database_server(databases=["default"]) == []
    if connection.vendor == "sqlite":
        return  # one writer at a time: SQLite needs no row locks
    monkeypatch.setattr(connection.features, "has_select_for_update_skip_locked", False)
    (error,) = check_database_server(databases=["default"])
    assert error.id == "deadletter.E012"
    assert "SKIP LOCKED" in error.msg
    assert check_database_server(databases=None) == []


@pytest.mark.django_db
def test_w003_a_packet_limit_under_twice_the_row_limit_is_warned_about(settings: Any) -> None:
    from django.db import connection

    from deadletter.checks import check_database_server
    from deadletter.store import sql

    if connection.vendor != "mysql":
        pytest.skip("max_allowed_packet is MySQL/MariaDB's")
    packet = sql.max_packet(connection)
    settings.DEADLETTER_MAX_ROW_BYTES = (packet - 2**16) // 2
    assert check_database_server(databases=["default"]) == []
    settings.DEADLETTER_MAX_ROW_BYTES = packet // 2
    (warning,) = check_database_server(databases=["default"])
    assert warning.id == "deadletter.W003"
    assert f"{packet:,}" in warning.msg


# --- the queue database on SQLite --------------------------------------------------


@pytest.fixture
def sqlite_aliases(settings: Any, tmp_path: Path) -> Any:
    """Add SQLite aliases for one test: `add(alias, name, options)`; removed after."""
    from django.db import connections

    added: list[str] = []

    def add(alias: str, name: str, options: dict[str, Any]) -> str:
        entry = copy.deepcopy(connections.settings["default"])
        entry.update(ENGINE="django.db.backends.sqlite3", NAME=str(tmp_path / name))
        entry["OPTIONS"] = options
        connections.settings[alias] = entry
        added.append(alias)
        return alias

    yield add
    for alias in added:
        with contextlib.suppress(AttributeError):  # never connected
            del connections[alias]
        del connections.settings[alias]


WAL = {"init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"}


def on_database(alias: str) -> list[Any]:
    """The checks `migrate` and `check --database` run on the queue's alias."""
    from deadletter.checks import check_database_server

    return check_database_server(databases=[alias])


def test_w001_a_sqlite_queue_database_without_wal(settings: Any, sqlite_aliases: Any) -> None:
    settings.DEADLETTER_DATABASE = sqlite_aliases("stock", "stock.sqlite3", {})
    assert check_settings() == []  # not on every command
    (warning,) = on_database("stock")
    assert warning.id == "deadletter.W001"
    assert "'stock'" in warning.msg
    assert "PRAGMA journal_mode=WAL" in str(warning.hint)
    assert '"transaction_mode": "IMMEDIATE"' in str(warning.hint)


def test_w001_offers_synchronous_full_with_its_cost_and_both_options_paste_as_they_are(
    settings: Any, sqlite_aliases: Any
) -> None:
    settings.DEADLETTER_DATABASE = sqlite_aliases("stock", "stock.sqlite3", {})
    (warning,) = on_database("stock")
    hint = str(warning.hint)
    pasted = re.findall(r"DATABASES\['stock'\]\['OPTIONS'\] = (\{[^}]*\})", hint)
    assert len(pasted) == 2
    normal, full = (ast.literal_eval(text) for text in pasted)
    assert "synchronous=NORMAL" in normal["init_command"]
    assert "synchronous=FULL" in full["init_command"]
    assert "power loss" in hint and "parks a second" in hint
    assert "store_failed_msgs(queue, [messages])" in hint and "docs/durability.md" in hint
    for name, options in (("fast", normal), ("durable", full)):
        settings.DEADLETTER_DATABASE = sqlite_aliases(name, f"{name}.sqlite3", options)
        assert on_database(name) == []


def test_w001_is_quiet_when_init_command_sets_wal(settings: Any, sqlite_aliases: Any) -> None:
    settings.DEADLETTER_DATABASE = sqlite_aliases("walled", "walled.sqlite3", WAL)
    assert on_database("walled") == []


def test_w002_the_queue_alias_sharing_a_sqlite_file_with_another(
    settings: Any, sqlite_aliases: Any
) -> None:
    sqlite_aliases("app", "shared.sqlite3", WAL)
    settings.DEADLETTER_DATABASE = sqlite_aliases("queue", "shared.sqlite3", WAL)
    (warning,) = on_database("queue")
    assert warning.id == "deadletter.W002"
    assert "'app'" in warning.msg
    assert "DEADLETTER_DATABASE = 'app'" in str(warning.hint)
    assert "file of its own" in str(warning.hint)


# --- the API mounted without rest_framework ------------------------------------------

urlpatterns: list[Any] = []  # a ROOT_URLCONF that mounts nothing


def without_rest_framework(installed: list[str]) -> list[str]:
    return [app for app in installed if app != "rest_framework"]


def test_e008_the_api_mounted_without_rest_framework_installed(settings: Any) -> None:
    settings.INSTALLED_APPS = without_rest_framework(settings.INSTALLED_APPS)
    (error,) = check_api_mount()
    assert error.id == "deadletter.E008"
    assert "'rest_framework'" in str(error.hint)


def test_e008_is_quiet_with_rest_framework_installed() -> None:
    assert check_api_mount() == []


def test_e008_is_quiet_when_the_api_is_not_mounted(settings: Any) -> None:
    settings.INSTALLED_APPS = without_rest_framework(settings.INSTALLED_APPS)
    settings.ROOT_URLCONF = "tests.test_checks"
    assert check_api_mount() == []


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SECURE_PROXY_SSL_HEADER", ("HTTP_X_FORWARDED_PROTO", "https")),
        ("USE_X_FORWARDED_HOST", True),
        ("USE_X_FORWARDED_PORT", True),
    ],
)
def test_w004_a_trusted_proxy_header_without_num_proxies(
    settings: Any, name: str, value: object
) -> None:
    setattr(settings, name, value)
    (warning,) = check_api_proxy()
    assert warning.id == "deadletter.W004"
    assert name in warning.msg and "NUM_PROXIES" in warning.msg


@pytest.mark.parametrize(
    "change",
    [
        {"REST_FRAMEWORK": {"NUM_PROXIES": 1}},
        {"REST_FRAMEWORK": {"NUM_PROXIES": 0}},
        {"DEADLETTER_API_THROTTLE_RATES": {"failed_auth": None}},
        {"ROOT_URLCONF": "tests.test_checks"},
    ],
)
def test_w004_is_quiet_where_no_address_is_read_from_the_header(
    settings: Any, change: dict[str, Any]
) -> None:
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    for name, value in change.items():
        setattr(settings, name, value)
    assert check_api_proxy() == []


def test_w004_is_quiet_without_a_proxy_header() -> None:
    assert check_api_proxy() == []


def test_manage_py_check_reports_w004(settings: Any) -> None:
    settings.USE_X_FORWARDED_HOST = True
    out, err = io.StringIO(), io.StringIO()
    call_command("check", stdout=out, stderr=err)
    assert "deadletter.W004" in err.getvalue()


@pytest.mark.heavy
def test_manage_py_check_reports_the_sqlite_checks_with_database_and_the_api_always(
    tmp_path: Path,
) -> None:
    db = tmp_path / "stock.sqlite3"
    (tmp_path / "stock_settings.py").write_text(
        "from project.settings import *  # noqa: F403\n"
        f"STOCK = {{'ENGINE': 'django.db.backends.sqlite3', 'NAME': {str(db)!r}}}\n"
        "DATABASES = {'default': STOCK, 'other': dict(STOCK)}\n"
        "INSTALLED_APPS = [a for a in INSTALLED_APPS if a != 'rest_framework']  # noqa: F405\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{REPO}:{tmp_path}"}
    result = manage_py("check", "--settings", "stock_settings", env=env, timeout=60)
    assert result.returncode == 1, result.stderr
    assert "deadletter.E008" in result.stderr and "deadletter.W001" not in result.stderr
    result = manage_py(
        "check", "--database", "default", "--settings", "stock_settings", env=env, timeout=60
    )
    for check_id in ("deadletter.W001", "deadletter.W002", "deadletter.E008"):
        assert check_id in result.stderr


@pytest.mark.parametrize("codes", [[0, "A"], {"0": "A"}, {0: 1}, {True: "A"}])
def test_e016_event_codes_are_a_dict_of_int_to_name(settings: Any, codes: Any) -> None:
    settings.DEADLETTER_EVENT_CODES = codes
    assert ids(check_settings()) == ["deadletter.E016"]


@pytest.mark.parametrize("patterns", ["mail-*", ["mail-*", ""], [3], {"mail-*": True}])
def test_e017_api_queues_is_none_or_a_list_of_patterns(settings: Any, patterns: Any) -> None:
    settings.DEADLETTER_API_QUEUES = patterns
    assert ids(check_settings()) == ["deadletter.E017"]


def test_e017_accepts_a_list_of_patterns(settings: Any) -> None:
    settings.DEADLETTER_API_QUEUES = ["mail-*", "webhooks"]
    assert check_settings() == []


@pytest.mark.parametrize("limit", [0, -5, timedelta(0), "5 min", None, True, float("inf")])
def test_e019_the_database_outage_limit_is_a_positive_timedelta_or_seconds(
    settings: Any, limit: Any
) -> None:
    settings.DEADLETTER_DATABASE_OUTAGE_LIMIT = limit
    assert ids(check_time_limits()) == ["deadletter.E019"]


@pytest.mark.parametrize("limit", [timedelta(minutes=10), 30, 0.5])
def test_e019_accepts_a_timedelta_or_seconds(settings: Any, limit: Any) -> None:
    settings.DEADLETTER_DATABASE_OUTAGE_LIMIT = limit
    assert check_time_limits() == []


@pytest.mark.parametrize("retention", [timedelta(seconds=-1), 30, "30 days"])
def test_e023_archive_for_must_be_none_or_a_timedelta_of_at_least_0(
    settings: Any, retention: Any
) -> None:
    settings.DEADLETTER_ARCHIVE_FOR = retention
    assert ids(check_settings()) == ["deadletter.E023"]


@pytest.mark.parametrize("retention", [None, timedelta(0), timedelta(days=365)])
def test_e023_archive_for_none_zero_or_a_span_passes(settings: Any, retention: Any) -> None:
    settings.DEADLETTER_ARCHIVE_FOR = retention
    assert check_settings() == []


@pytest.mark.parametrize(
    ("key", "value", "check_id"),
    [
        ("archive_for", timedelta(days=-1), "deadletter.E020"),
        ("archive_for", 86_400, "deadletter.E020"),
        ("max_age", timedelta(0), "deadletter.E021"),
        ("max_age", None, "deadletter.E021"),
        ("max_age", timedelta.max, "deadletter.E021"),
        ("editable", "yes", "deadletter.E022"),
        ("editable", 1, "deadletter.E022"),
    ],
)
def test_e020_e022_a_queues_archive_for_max_age_and_editable(
    settings: Any, key: str, value: Any, check_id: str
) -> None:
    settings.DEADLETTER_HANDLERS = {"q": {"handler": "project.demo.handlers.log_only", key: value}}
    (error,) = check_handlers()
    assert error.id == check_id
    assert f"DEADLETTER_HANDLERS['q'][{key!r}]" in error.msg


def test_a_queues_archive_for_max_age_and_editable_pass_when_sound(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {
        "q": {
            "handler": "project.demo.handlers.log_only",
            "archive_for": None,
            "max_age": timedelta(days=7),
            "editable": True,
        }
    }
    assert check_handlers() == []


def test_manage_py_check_fails_on_an_alert_rule_without_a_site_url(settings: Any) -> None:
    settings.DEADLETTER_ALERTS = {"new_cause": True, "channels": [{"webhook": "https://h.example"}]}
    with pytest.raises(SystemCheckError) as failed:
        call_command("check", stdout=io.StringIO(), stderr=io.StringIO())
    said = str(failed.value)
    assert "deadletter.E024" in said and "needs a 'secret'" in said
    assert "deadletter.E026" in said


def redact_rules(queue: str, msg: Any) -> list[str]:
    return ["username"]


@pytest.mark.parametrize(
    ("redact", "said"),
    [
        ({"billing.*": ["fields[x]"]}, "only a list part takes an index"),
        ({"billing.*": ["subject[0]"]}, "only a list part takes an index"),
        ({"billing.*": ["timestamp"]}, "never masked"),
        ({"billing.*": ["CeleryKwargs..email"]}, "an empty key"),
        ({"billing.*": "username"}, "must be a list of names"),
        ("tests.test_checks.no_such_rules", "does not import"),
        ("tests.test_checks.not_callable", "is not callable"),
        (["username"], "must be a dict"),
    ],
)
def test_e028_a_redact_setting_that_names_nothing(settings: Any, redact: Any, said: str) -> None:
    settings.DEADLETTER_REDACT = redact
    errors = check_settings()
    assert ids(errors) == ["deadletter.E028"]
    assert said in errors[0].msg


@pytest.mark.parametrize(
    "redact",
    [
        None,
        {},
        {"billing.*": ["username", "fields[0]", "card_number", "CeleryKwargs.email"]},
        "tests.test_checks.redact_rules",
        redact_rules,
    ],
)
def test_e028_a_sound_redact_setting_passes(settings: Any, redact: Any) -> None:
    settings.DEADLETTER_REDACT = redact
    assert check_settings() == []


def test_manage_py_check_fails_on_a_bad_redacted_name(settings: Any) -> None:
    settings.DEADLETTER_REDACT = {"*": ["descriptions[one]"]}
    with pytest.raises(SystemCheckError) as failed:
        call_command("check", stdout=io.StringIO(), stderr=io.StringIO())
    assert "deadletter.E028" in str(failed.value)
