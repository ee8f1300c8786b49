"""The alert rules' settings: `DEADLETTER_ALERTS` (E024), a queue's `alerts` (E025),
`DEADLETTER_SITE_URL` (E026), `DEADLETTER_ALERT_DIGEST` (E027), and how a queue's
rules override the global ones."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from deadletter.checks import check_handlers, check_settings
from deadletter.reports.alerts.rules import rules_for

OK = "tests.factories.ok_handler"
HOOK = {"webhook": "https://hooks.example.com/dl", "secret": "s3cret"}


def messages(errors: list[Any]) -> list[tuple[str, str]]:
    return [(e.id, e.msg) for e in errors]


def test_sound_rules_with_a_site_url_pass(settings: Any) -> None:
    settings.DEADLETTER_SITE_URL = "https://ops.example.com/"
    settings.DEADLETTER_ALERTS = {
        "new_cause": True,
        "reopened_cause": False,
        "depth": 1000,
        "oldest_age": timedelta(hours=6),
        "expiring": timedelta(days=1),
        "breaker": True,
        "stalled": timedelta(minutes=15),
        "channels": ["mail_admins", HOOK],
    }
    settings.DEADLETTER_HANDLERS = {"q": {"handler": OK, "alerts": {"depth": 5, "channels": []}}}
    assert check_settings() == [] and check_handlers() == []


@pytest.mark.parametrize(
    ("alerts", "said"),
    [
        ({"depht": 10}, "DEADLETTER_ALERTS has unknown key 'depht'; known: new_cause"),
        ({"new_cause": 1}, "DEADLETTER_ALERTS['new_cause'] must be True or False, got 1"),
        ({"depth": 0}, "DEADLETTER_ALERTS['depth'] must be None or an int of at least 1, got 0"),
        ({"depth": True}, "DEADLETTER_ALERTS['depth'] must be None or an int of at least 1"),
        ({"oldest_age": 3600}, "DEADLETTER_ALERTS['oldest_age'] must be None or a timedelta"),
        ({"stalled": timedelta(0)}, "DEADLETTER_ALERTS['stalled'] must be None or a timedelta"),
        ({"expiring": "1d"}, "DEADLETTER_ALERTS['expiring'] must be None, True (the expiry"),
        ({"expiring": True}, "but that is unset: give a timedelta"),
        ({"channels": "mail_admins"}, "DEADLETTER_ALERTS['channels'] must be a list of channels"),
        ({"channels": ["slack"]}, "DEADLETTER_ALERTS['channels'][0] must be \"mail_admins\" or"),
        (
            {"channels": [{"webhook": "https://h.example.com/"}]},
            "DEADLETTER_ALERTS['channels'][0] needs a 'secret'",
        ),
        (
            {"channels": [{"webhook": "ftp://h.example.com/", "secret": "s"}]},
            "['channels'][0]['webhook'] must be an http(s):// URL, got 'ftp://h.example.com/'",
        ),
        (
            {"channels": [{**HOOK, "token": "x"}]},
            "['channels'][0] has unknown key 'token'; known: webhook, secret",
        ),
        ("on", "DEADLETTER_ALERTS must be a dict of alert rules, got 'on'"),
    ],
)
def test_e024_each_mistake_in_the_rules_says_what(settings: Any, alerts: Any, said: str) -> None:
    settings.DEADLETTER_SITE_URL = "https://ops.example.com"
    settings.DEADLETTER_ALERTS = alerts
    found = messages(check_settings())
    assert [i for i, _ in found] == ["deadletter.E024"], found
    assert said in found[0][1]


def test_e024_expiring_true_is_the_expiry_warnings_horizon(settings: Any) -> None:
    settings.DEADLETTER_SITE_URL = "https://ops.example.com"
    settings.DEADLETTER_EXPIRY_WARNING = timedelta(hours=12)
    settings.DEADLETTER_ALERTS = {"expiring": True}
    assert check_settings() == []
    assert rules_for("q").expiring == timedelta(hours=12)


def test_e025_a_queues_alerts_are_checked_as_the_global_ones(settings: Any) -> None:
    settings.DEADLETTER_SITE_URL = "https://ops.example.com"
    settings.DEADLETTER_HANDLERS = {"q": {"handler": OK, "alerts": {"depth": -1, "mail": True}}}
    found = messages(check_handlers())
    assert [i for i, _ in found] == ["deadletter.E025", "deadletter.E025"]
    assert "DEADLETTER_HANDLERS['q']['alerts'] has unknown key 'mail'" in found[0][1]
    assert "DEADLETTER_HANDLERS['q']['alerts']['depth'] must be None or an int" in found[1][1]


@pytest.mark.parametrize(
    ("alerts", "queue_alerts"), [({"new_cause": True}, None), ({}, {"stalled": timedelta(1)})]
)
def test_e026_a_rule_on_needs_the_site_url(
    settings: Any, alerts: dict[str, Any], queue_alerts: Any
) -> None:
    settings.DEADLETTER_ALERTS = alerts
    if queue_alerts is not None:
        settings.DEADLETTER_HANDLERS = {"q": {"handler": OK, "alerts": queue_alerts}}
    found = messages(check_settings())
    assert [i for i, _ in found] == ["deadletter.E026"]
    assert "DEADLETTER_SITE_URL is unset, but an alert rule is on" in found[0][1]


def test_e026_no_rule_on_no_site_url_needed(settings: Any) -> None:
    settings.DEADLETTER_ALERTS = {"new_cause": False, "channels": ["mail_admins"]}
    assert check_settings() == []


@pytest.mark.parametrize(
    "url", ["ops.example.com", "ftp://ops.example.com", "https://", "https://ops.example.com/?a=1"]
)
def test_e026_the_site_url_must_be_an_absolute_http_url(settings: Any, url: str) -> None:
    settings.DEADLETTER_SITE_URL = url
    found = messages(check_settings())
    assert [i for i, _ in found] == ["deadletter.E026"]
    assert repr(url) in found[0][1]


@pytest.mark.parametrize("digest", [timedelta(0), 600, None])
def test_e027_the_digest_interval_is_a_positive_timedelta(settings: Any, digest: Any) -> None:
    settings.DEADLETTER_ALERT_DIGEST = digest
    found = messages(check_settings())
    assert found == [
        ("deadletter.E027", f"DEADLETTER_ALERT_DIGEST must be a timedelta above 0, got {digest!r}.")
    ]


def test_a_queues_rules_override_the_global_ones_key_by_key(settings: Any) -> None:
    settings.DEADLETTER_ALERTS = {
        "new_cause": True,
        "depth": 1000,
        "oldest_age": timedelta(hours=6),
        "channels": ["mail_admins"],
    }
    settings.DEADLETTER_HANDLERS = {
        "billing": {"handler": OK, "alerts": {"depth": 10, "oldest_age": None, "channels": [HOOK]}},
        "other": OK,
    }
    billing, other = rules_for("billing"), rules_for("other")
    assert (billing.new_cause, billing.depth, billing.oldest_age) == (True, 10, None)
    assert billing.channels == (HOOK,)
    assert (other.depth, other.oldest_age, other.channels) == (
        1000,
        timedelta(hours=6),
        ("mail_admins",),
    )
