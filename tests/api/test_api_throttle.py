"""How often the API may be called: failed authentications per client address and
per credential, and requests per user (`DEADLETTER_API_THROTTLE_RATES`), the project's own DRF
throttles, and check E009 on the setting."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import Permission, User
from django.core import checks
from django.core.cache import cache
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient
from rest_framework.throttling import UserRateThrottle

from deadletter.checks import check_settings
from deadletter.conf import conf

pytestmark = pytest.mark.django_db(transaction=True)

QUEUES = "/api/deadletter/queues/"


@pytest.fixture(autouse=True)
def empty_cache() -> Iterator[None]:
    """Throttles keep their history in Django's cache: none carried between tests."""
    cache.clear()
    yield
    cache.clear()


def viewer(username: str = "service") -> User:
    user = User.objects.create_user(username, password="s3cret")
    user.user_permissions.add(Permission.objects.get(codename="view_queuedmessage"))
    return user


def token_client(token: str, address: str = "127.0.0.1") -> APIClient:
    client = APIClient(REMOTE_ADDR=address)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def good_token(user: User) -> str:
    key: str = Token.objects.create(user=user).key
    return key


@override_settings(DEADLETTER_API_THROTTLE_RATES={"failed_auth": "3/min"})
def test_a_wrong_token_repeated_past_the_rate_is_429_with_retry_after() -> None:
    wrong = token_client("not-a-token")
    assert [wrong.get(QUEUES).status_code for _ in range(3)] == [401, 401, 401]
    throttled = wrong.get(QUEUES)
    assert throttled.status_code == 429
    assert 0 < int(throttled["Retry-After"]) <= 60


def test_valid_clients_behind_an_address_that_sent_30_bad_tokens_get_in() -> None:
    proxy = "10.0.0.1"
    assert {token_client(f"bad-{i}", proxy).get(QUEUES).status_code for i in range(30)} == {401}
    assert token_client("bad-30", proxy).get(QUEUES).status_code == 429
    clients = [token_client(good_token(viewer(f"service-{i}")), proxy) for i in range(20)]
    assert {client.get(QUEUES).status_code for client in clients for _ in range(5)} == {200}


@override_settings(DEADLETTER_API_THROTTLE_RATES={"failed_auth": "3/min"})
def test_a_guesser_trying_a_new_token_each_time_is_429_with_retry_after_past_the_rate() -> None:
    assert [token_client(f"guess-{i}").get(QUEUES).status_code for i in range(3)] == [401] * 3
    for i in range(3, 10):
        throttled = token_client(f"guess-{i}").get(QUEUES)
        assert throttled.status_code == 429
        assert 0 < int(throttled["Retry-After"]) <= 60


@override_settings(DEADLETTER_API_THROTTLE_RATES={"failed_auth": "3/min"})
def test_without_num_proxies_a_forged_x_forwarded_for_never_makes_a_new_address() -> None:
    """Each guess with an X-Forwarded-For of its own, from one connection: without
    `NUM_PROXIES` the header is the client's to write, so the throttle counts the
    connection's address."""
    codes = []
    for i in range(4):
        client = token_client(f"guess-{i}", "198.51.100.7")
        codes.append(client.get(QUEUES, HTTP_X_FORWARDED_FOR=f"203.0.113.{i}").status_code)
    assert codes == [401, 401, 401, 429]


@override_settings(DEADLETTER_API_THROTTLE_RATES={"failed_auth": "3/min"})
def test_with_num_proxies_the_address_the_proxy_appended_is_counted() -> None:
    """Behind one proxy (`NUM_PROXIES` 1) clients share the connection's address
    and are told apart by the entry the proxy appends, not by what they wrote."""
    with override_settings(REST_FRAMEWORK={"NUM_PROXIES": 1}):  # DRF reloads on the signal
        guesser = [
            token_client(f"guess-{i}", "10.0.0.1").get(
                QUEUES, HTTP_X_FORWARDED_FOR=f"203.0.113.{i}, 198.51.100.7"
            )
            for i in range(4)
        ]
        other = token_client("wrong", "10.0.0.1").get(QUEUES, HTTP_X_FORWARDED_FOR="198.51.100.8")
    assert [r.status_code for r in guesser] == [401, 401, 401, 429]
    assert other.status_code == 401


@override_settings(DEADLETTER_API_THROTTLE_RATES={"failed_auth": "2/min"})
def test_a_guesser_is_answered_401_again_once_its_failures_leave_the_window() -> None:
    with time_machine.travel(timezone.now(), tick=False) as clock:
        for i in range(2):
            token_client(f"guess-{i}").get(QUEUES)
        assert token_client("guess-2").get(QUEUES).status_code == 429
        clock.shift(timedelta(seconds=61))
        assert token_client("guess-3").get(QUEUES).status_code == 401


@override_settings(DEADLETTER_API_THROTTLE_RATES={"failed_auth": "5/min"})
def test_an_address_keeps_no_more_failures_than_the_rate_looks_at() -> None:
    for i in range(50):
        token_client(f"guess-{i}").get(QUEUES)
    assert len(cache.get("deadletter-throttle-failed_auth-127.0.0.1")) == 5


@override_settings(
    DEADLETTER_API_THROTTLE_RATES={"failed_auth": "2/min"},
    REST_FRAMEWORK={
        "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.BasicAuthentication"]
    },
)
def test_wrong_basic_passwords_are_slowed_the_same_way() -> None:
    viewer()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Basic {base64.b64encode(b'service:no').decode()}")
    assert [client.get(QUEUES).status_code for _ in range(3)] == [401, 401, 429]


def basic_client(username: str, password: str, address: str) -> APIClient:
    client = APIClient(REMOTE_ADDR=address)
    encoded = base64.b64encode(f"{username}:{password}".encode()).decode()
    client.credentials(HTTP_AUTHORIZATION=f"Basic {encoded}")
    return client


@override_settings(
    DEADLETTER_API_THROTTLE_RATES={"failed_auth": "2/min"},
    REST_FRAMEWORK={
        "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.BasicAuthentication"]
    },
)
def test_passwords_guessed_for_one_user_from_many_addresses_are_held_to_the_rate() -> None:
    viewer()
    viewer("other")
    guesses = [basic_client("service", f"guess-{i}", f"10.0.0.{i}") for i in range(3)]
    assert [client.get(QUEUES).status_code for client in guesses] == [401, 401, 429]
    # The user is held off meanwhile, the right password included (nothing to learn
    # from the answer); other users are not.
    assert basic_client("service", "s3cret", "10.0.1.1").get(QUEUES).status_code == 429
    assert basic_client("other", "s3cret", "10.0.0.1").get(QUEUES).status_code == 200


@override_settings(DEADLETTER_API_THROTTLE_RATES={"failed_auth": "2/min"})
def test_successes_and_anonymous_calls_are_not_failures() -> None:
    client = token_client(good_token(viewer()))
    assert {client.get(QUEUES).status_code for _ in range(5)} == {200}
    assert {APIClient().get(QUEUES).status_code for _ in range(5)} == {401}


def test_the_defaults_leave_an_operator_alone() -> None:
    assert conf.API_THROTTLE_RATES == {"failed_auth": "30/min", "user": None}
    mistyped = token_client("not-a-token")
    assert {mistyped.get(QUEUES).status_code for _ in range(5)} == {401}
    client = token_client(good_token(viewer()))
    assert {client.get(QUEUES).status_code for _ in range(100)} == {200}


@override_settings(DEADLETTER_API_THROTTLE_RATES={"failed_auth": None})
def test_none_turns_a_scope_off() -> None:
    assert {token_client("not-a-token").get(QUEUES).status_code for _ in range(40)} == {401}


@override_settings(DEADLETTER_API_THROTTLE_RATES={"user": "2/min"})
def test_the_user_rate_counts_each_users_requests() -> None:
    assert conf.API_THROTTLE_RATES["failed_auth"] == "30/min"
    client = token_client(good_token(viewer()))
    assert [client.get(QUEUES).status_code for _ in range(3)] == [200, 200, 429]
    assert 0 < int(client.get(QUEUES)["Retry-After"]) <= 60
    assert token_client(good_token(viewer("other"))).get(QUEUES).status_code == 200


class OnePerMinute(UserRateThrottle):
    rate = "1/min"


@override_settings(
    REST_FRAMEWORK={"DEFAULT_THROTTLE_CLASSES": ["tests.api.test_api_throttle.OnePerMinute"]}
)
def test_the_projects_drf_throttles_apply_too() -> None:
    client = token_client(good_token(viewer()))
    assert [client.get(QUEUES).status_code for _ in range(2)] == [200, 429]


@pytest.mark.parametrize(
    "rates",
    [
        ["30/min"],
        {"failed_auths": "30/min"},
        {"failed_auth": "30 per minute"},
        {"failed_auth": "0/min"},
        {"failed_auth": "30/fortnight"},
        {"user": 30},
    ],
)
def test_a_malformed_rate_is_check_e009(settings, rates: object) -> None:
    settings.DEADLETTER_API_THROTTLE_RATES = rates
    errors = [e for e in check_settings() if e.id == "deadletter.E009"]
    assert len(errors) == 1
    assert "DEADLETTER_API_THROTTLE_RATES" in errors[0].msg
    assert errors[0].level == checks.ERROR


@pytest.mark.parametrize("rates", [{}, {"user": "100/s", "failed_auth": None}, {"user": "5/day"}])
def test_well_formed_rates_pass_the_check(settings, rates: object) -> None:
    settings.DEADLETTER_API_THROTTLE_RATES = rates
    assert [e for e in check_settings() if e.id == "deadletter.E009"] == []


def test_manage_py_check_reports_e009(settings) -> None:
    settings.DEADLETTER_API_THROTTLE_RATES = {"failed_auth": "lots"}
    with pytest.raises(SystemCheckError, match="deadletter.E009"):
        call_command("check")
