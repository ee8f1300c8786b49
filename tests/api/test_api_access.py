"""Who may call the API: no anonymous access; token and session authentication,
or the project's own classes (Basic only when the project enables it); one
Django model permission per endpoint; each refusal."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import Permission, User
from django.core.cache import cache
from django.test import override_settings
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from deadletter.queue import fetch_failed_msgs
from tests.factories import park

pytestmark = pytest.mark.django_db(transaction=True)

API = "/api/deadletter"
BASIC_AND_SESSION = override_settings(
    REST_FRAMEWORK={
        "DEFAULT_AUTHENTICATION_CLASSES": [
            "rest_framework.authentication.BasicAuthentication",
            "rest_framework.authentication.SessionAuthentication",
        ]
    }
)


@pytest.fixture(autouse=True)
def no_failures_counted() -> Iterator[None]:
    """Failed authentications are counted in the cache, per address: none carried over."""
    cache.clear()
    yield
    cache.clear()


def user_with(*codenames: str) -> User:
    user = User.objects.create_user("service", password="s3cret")
    for codename in codenames:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    return User.objects.get(pk=user.pk)  # a fresh instance: no cached permissions


def token_client(user: User) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


ENDPOINTS = [
    ("get", f"{API}/queues/"),
    ("get", f"{API}/queues/q/"),
    ("get", f"{API}/queues/q/messages/"),
    ("post", f"{API}/queues/q/messages/"),
    ("post", f"{API}/queues/q/drain/"),
    ("get", f"{API}/messages/00/"),
    ("delete", f"{API}/messages/00/"),
    ("get", f"{API}/schema/"),
    ("get", f"{API}/schema/docs/"),
]


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
def test_anonymous_callers_get_401_with_the_token_challenge(method: str, path: str) -> None:
    response = getattr(APIClient(), method)(path)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"


def test_a_wrong_token_is_401() -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-token")
    assert client.get(f"{API}/queues/").status_code == 401


def test_a_token_authenticates() -> None:
    park("m")
    client = token_client(user_with("view_queuedmessage"))
    assert client.get(f"{API}/queues/").json()[0]["depth"] == 1


def basic_client(username: str, password: str) -> APIClient:
    client = APIClient()
    pair = base64.b64encode(f"{username}:{password}".encode()).decode()
    client.credentials(HTTP_AUTHORIZATION=f"Basic {pair}")
    return client


def test_basic_credentials_are_refused_unless_the_project_enables_basic() -> None:
    user_with("view_queuedmessage")
    response = basic_client("service", "s3cret").get(f"{API}/queues/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"


@BASIC_AND_SESSION
def test_a_project_that_enables_basic_gets_it() -> None:
    user_with("view_queuedmessage")
    assert basic_client("service", "s3cret").get(f"{API}/queues/").status_code == 200
    refused = basic_client("service", "no").get(f"{API}/queues/")
    assert refused.status_code == 401
    assert refused["WWW-Authenticate"] == 'Basic realm="api"'


@BASIC_AND_SESSION
def test_the_project_classes_replace_token_and_session() -> None:
    client = token_client(user_with("view_queuedmessage"))
    response = client.get(f"{API}/queues/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Basic realm="api"'


class BearerAuthentication(TokenAuthentication):
    keyword = "Bearer"


@override_settings(
    REST_FRAMEWORK={
        "DEFAULT_AUTHENTICATION_CLASSES": ["tests.api.test_api_access.BearerAuthentication"]
    }
)
def test_the_projects_own_token_class_authenticates_and_challenges() -> None:
    park("m")
    key = Token.objects.create(user=user_with("view_queuedmessage")).key
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert client.get(f"{API}/queues/").json()[0]["depth"] == 1
    anonymous = APIClient().get(f"{API}/queues/")
    assert anonymous.status_code == 401
    assert anonymous["WWW-Authenticate"] == "Bearer"
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get(f"{API}/queues/").status_code == 401


@override_settings(
    REST_FRAMEWORK={
        "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.SessionAuthentication"]
    }
)
def test_a_first_class_without_a_challenge_answers_403_as_drf_does() -> None:
    assert APIClient().get(f"{API}/queues/").status_code == 403
    client = APIClient()
    client.force_login(user_with("view_queuedmessage"))
    assert client.get(f"{API}/queues/").status_code == 200


def test_a_session_works_and_needs_the_csrf_token_to_write() -> None:
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(user_with("view_queuedmessage", "add_queuedmessage"))
    assert client.get(f"{API}/queues/").status_code == 200
    response = client.post(f"{API}/queues/q/messages/", {"subject": "s"}, format="json")
    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]
    assert fetch_failed_msgs("q") == []


def test_a_user_without_the_view_permission_reads_nothing() -> None:
    park("m")
    client = token_client(user_with("add_queuedmessage"))
    for path in (f"{API}/queues/", f"{API}/queues/q/messages/", f"{API}/schema/"):
        assert client.get(path).status_code == 403


def test_parking_needs_the_add_permission() -> None:
    client = token_client(user_with("view_queuedmessage"))
    response = client.post(f"{API}/queues/q/messages/", {"subject": "s"}, format="json")
    assert response.status_code == 403
    assert fetch_failed_msgs("q") == []
    allowed = token_client(User.objects.create_user("adder"))
    allowed_user = User.objects.get(username="adder")
    allowed_user.user_permissions.add(Permission.objects.get(codename="add_queuedmessage"))
    assert allowed.post(f"{API}/queues/q/messages/", {}, format="json").status_code == 201


def test_deleting_needs_the_delete_permission() -> None:
    (key,) = park("m")
    client = token_client(user_with("view_queuedmessage"))
    assert client.delete(f"{API}/messages/{key.hex()}/").status_code == 403
    assert len(fetch_failed_msgs("q")) == 1


def test_deleting_with_the_delete_permission() -> None:
    (key,) = park("m")
    client = token_client(user_with("delete_queuedmessage"))
    assert client.delete(f"{API}/messages/{key.hex()}/").status_code == 204


def test_draining_needs_the_drain_permission(settings) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.ok_handler"}
    park("m")
    client = token_client(user_with("view_queuedmessage", "delete_queuedmessage"))
    assert client.post(f"{API}/queues/q/drain/").status_code == 403
    assert len(fetch_failed_msgs("q")) == 1


def test_staff_status_alone_grants_nothing() -> None:
    user = User.objects.create_user("staff", is_staff=True)
    assert token_client(user).get(f"{API}/queues/").status_code == 403


def test_the_first_mount_still_answers() -> None:
    park("m")
    client = token_client(user_with("view_queuedmessage"))
    body = client.get("/deadletter/api/queues/q/messages/").json()
    assert body["results"][0]["messages"][0]["subject"] == "m"
