"""The demo project's commands, which `./dev serve` runs."""

from __future__ import annotations

import io
import re

import pytest
from django.contrib.auth import authenticate
from django.core.management import call_command

from deadletter.queue import fetch_failed_msgs

pytestmark = pytest.mark.django_db


def test_demo_seed_parks_messages_once() -> None:
    call_command("demo_seed", stdout=io.StringIO())
    call_command("demo_seed", stdout=io.StringIO())
    total = sum(
        len(fetch_failed_msgs(q)) for q in ("webhook-queue", "telegram-queue", "discord-queue")
    )
    assert total == 5
    (task,) = fetch_failed_msgs("celery.celery")  # the demo's failed Celery task, once
    assert task.msg.subject == "project.demo.tasks.charge_card"
    assert task.msg.extra["CeleryArgs"] == [1042, 2599]


def test_demo_admin_prints_a_login_that_works() -> None:
    out = io.StringIO()
    call_command("demo_admin", "--url", "http://127.0.0.1:9000/admin/", stdout=out)
    match = re.search(r"user '(\w+)' password '([^']+)' at (\S+)", out.getvalue())
    assert match is not None
    user, password, url = match.groups()
    assert authenticate(username=user, password=password) is not None
    assert url == "http://127.0.0.1:9000/admin/"
