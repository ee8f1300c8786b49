"""deadletter.queue.alert_channels: the one reading of an alert channel spec, which
the checks (E024, E025) and the sender share; each problem named in its place."""

from __future__ import annotations

from typing import Any

import pytest

from deadletter.queue.alert_channels import channel_problems, channels_problems, url_problem

HOOK = {"webhook": "https://hooks.example.com/x", "secret": "s3cret"}


@pytest.mark.parametrize("spec", ["mail_admins", HOOK, {**HOOK, "webhook": "http://h.example/"}])
def test_mail_admins_and_a_webhook_with_an_http_url_and_a_secret_are_sound(spec: Any) -> None:
    assert channel_problems(spec) == []


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("sms", ['channel must be "mail_admins" or {"webhook": url, "secret": str}, got \'sms\'']),
        (
            {**HOOK, "extra": "1"},
            ["channel has unknown key 'extra'; known: webhook, secret"],
        ),
        (
            {**HOOK, "webhook": "ftp://h.example.com/"},
            ["channel['webhook'] must be an http(s):// URL, got 'ftp://h.example.com/'"],
        ),
        (
            {**HOOK, "webhook": "http://[::1/"},
            ["channel['webhook'] must be an http(s):// URL, got 'http://[::1/'"],
        ),
        (
            {"url": "https://h.example.com/", "secret": "s"},
            [
                "channel has unknown key 'url'; known: webhook, secret",
                "channel['webhook'] must be an http(s):// URL, got None",
            ],
        ),
        (
            {"webhook": "https://h.example.com/"},
            [
                "channel needs a 'secret' (a non-empty str the webhook's signature is made "
                "with), got None"
            ],
        ),
    ],
)
def test_each_problem_of_a_spec_is_named(spec: Any, said: list[str]) -> None:
    assert channel_problems(spec) == said


def test_a_secret_that_is_not_a_str_is_named_by_its_type_only() -> None:
    [said] = channel_problems({**HOOK, "secret": b"bytes-secret"}, "channels[0]")
    assert said.endswith("got a bytes") and "bytes-secret" not in said


def test_a_list_names_each_spec_by_its_index() -> None:
    assert channels_problems("mail_admins", "X") == [
        "X must be a list of channels, got 'mail_admins'"
    ]
    assert channels_problems(["mail_admins", HOOK, {**HOOK, "secret": ""}], "X") == [
        "X[2] needs a 'secret' (a non-empty str the webhook's signature is made with), got ''"
    ]


@pytest.mark.parametrize("url", [None, "", "file:///tmp/alerts", "https://", "http://[x]/"])
def test_a_webhook_url_is_an_absolute_http_or_https_url_with_a_host(url: Any) -> None:
    assert url_problem(url, "U") == f"U must be an http(s):// URL, got {url!r}"
