from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis
import pytest

from tests.factories import FIXTURES, REPO

# `--quick` loads this profile: a tenth of Hypothesis's 100 examples, and of every count
# written `N * settings.default.max_examples // 100`; without it, every count as written.
hypothesis.settings.register_profile("quick", max_examples=10)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--quick",
        action="store_true",
        help="the contributor's loop (./dev quick): a tenth of the Hypothesis examples and a "
        "fast password hasher; every assertion still runs",
    )


def pytest_configure(config: pytest.Config) -> None:
    """The marker beside the profile: both say what `./dev quick` leaves to `./dev test`."""
    config.addinivalue_line(
        "markers",
        "heavy: seconds each (a child process, a real terminal, a leak count): ./dev test and "
        "every CI leg run them, ./dev quick leaves them out",
    )
    if config.getoption("quick"):
        hypothesis.settings.load_profile("quick")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that starts a Django process of its own (`subprocess_env`) is heavy: a second
    or more each for the child's start alone."""
    for item in items:
        if "subprocess_env" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.heavy)


@pytest.fixture(scope="session", autouse=True)
def quick_password_hasher(request: pytest.FixtureRequest) -> Iterator[None]:
    """Under `--quick`, MD5 hashes the fixtures' passwords: PBKDF2 costs half a second a user
    on this 2-core machine, and hundreds of admin tests make one. The full run keeps PBKDF2."""
    if not request.config.getoption("quick"):
        yield
        return
    from django.test import override_settings

    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]):
        yield


@pytest.fixture(scope="session", autouse=True)
def no_spool_folder_left() -> Iterator[None]:
    """The spool folder beside the SQLite test database outlives its files (the
    store never removes it, so parkers never race on it): the run removes it."""
    yield
    from django.conf import settings

    from deadletter.store.spool import SUFFIX

    name = settings.DATABASES["default"].get("TEST", {}).get("NAME")
    if settings.DATABASES["default"]["ENGINE"].endswith("sqlite3") and name:
        shutil.rmtree(f"{Path(name).absolute()}{SUFFIX}", ignore_errors=True)


@pytest.fixture(scope="session")
def manifest() -> dict[str, Any]:
    return json.loads((FIXTURES / "manifest.json").read_text())


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


def database_url(alias: str = "default") -> str:
    """A DATABASE_URL naming the database `alias` points at now (the test database in a test)."""
    from django.db import connections

    s = connections[alias].settings_dict
    if s["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{s['NAME']}"
    mysql = s["ENGINE"].endswith("mysql")
    host = s.get("HOST") or "127.0.0.1"
    port = s.get("PORT") or (3306 if mysql else 5432)
    auth = s.get("USER") or ("root" if mysql else "postgres")
    if s.get("PASSWORD"):
        auth += f":{s['PASSWORD']}"
    return f"{'mysql' if mysql else 'postgres'}://{auth}@{host}:{port}/{s['NAME']}"


@pytest.fixture
def subprocess_env(transactional_db: None) -> dict[str, str]:
    """Environment for a child process that must see this test's database."""
    import os

    env = dict(os.environ)
    env["DATABASE_URL"] = database_url()
    env["DJANGO_SETTINGS_MODULE"] = "project.settings"
    env["PYTHONPATH"] = str(REPO)
    return env


@pytest.fixture
def unreachable_db(transactional_db: None) -> Any:
    """Point the default connection at a database that cannot be reached, then back."""
    from django.db import connection

    saved = dict(connection.settings_dict)
    connection.close()
    if saved["ENGINE"].endswith("sqlite3"):
        connection.settings_dict["NAME"] = "/nonexistent-dir/deadletter/db.sqlite3"
    else:
        connection.settings_dict["PORT"] = "1"
        connection.settings_dict["OPTIONS"] = {**saved["OPTIONS"], "connect_timeout": 2}
    yield connection
    connection.close()
    connection.settings_dict.clear()
    connection.settings_dict.update(saved)
