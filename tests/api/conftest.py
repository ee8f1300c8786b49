"""Fixtures the API's test modules share."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient


@pytest.fixture
def api() -> APIClient:
    """A client logged in as a superuser: every permission the API asks for."""
    client = APIClient()
    client.force_login(User.objects.create_superuser("root"))
    return client
