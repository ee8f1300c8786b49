"""The brokers the Celery tests run against, from the environment so that a suite
can run beside another (its own vhost, its own Redis database):
`DEADLETTER_TEST_AMQP_URL` (default `amqp://guest:guest@127.0.0.1:5672//`) and
`DEADLETTER_TEST_REDIS_URL` (default `redis://127.0.0.1:6379/0`). A broker that
is down skips a test on a developer's machine and fails it in CI
(`DEADLETTER_REQUIRE_BROKERS`, set by .ci/run)."""

from __future__ import annotations

import os
import socket
from urllib.parse import urlsplit

import pytest

AMQP_URL = os.environ.get("DEADLETTER_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
REDIS_URL = os.environ.get("DEADLETTER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
BROKERS = {"rabbitmq": AMQP_URL, "redis": REDIS_URL}
DEFAULT_PORTS = {"amqp": 5672, "redis": 6379}


def reachable(name: str) -> str:
    """The URL of broker `name`, once something answers at its address."""
    url = BROKERS[name]
    parts = urlsplit(url)
    where = (parts.hostname or "127.0.0.1", parts.port or DEFAULT_PORTS.get(parts.scheme, 0))
    try:
        socket.create_connection(where, timeout=2).close()
    except OSError as exc:
        if os.environ.get("DEADLETTER_REQUIRE_BROKERS"):
            pytest.fail(f"{name} at {where[0]}:{where[1]} is down: {exc}")
        pytest.skip(f"{name} at {where[0]}:{where[1]} is down")
    return url
