"""The README's install recipe in a brand-new `startproject` site, as a newcomer
follows it: the app in INSTALLED_APPS, its URLs mounted, `migrate`, `check`, a
message parked, the quick start's handler named, a drain."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.factories import REPO

pytestmark = pytest.mark.slow


def run(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_URL"))}
    env["PYTHONPATH"] = f"{site}:{REPO}"
    return subprocess.run(
        [sys.executable, *args], cwd=site, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_install_recipe_works_in_a_fresh_startproject_site(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    assert run(site, "-m", "django", "startproject", "mysite", ".").returncode == 0
    settings = site / "mysite" / "settings.py"
    settings.write_text(
        settings.read_text().replace(
            "INSTALLED_APPS = [", 'INSTALLED_APPS = [\n    "deadletter",', 1
        )
        + '\nDEADLETTER_HANDLERS = {"webhook-queue": "hooks.redeliver"}\n'
    )
    urls = site / "mysite" / "urls.py"
    urls.write_text(
        urls.read_text().replace(
            "from django.urls import path", "from django.urls import include, path"
        )
        + 'urlpatterns += [path("deadletter/", include("deadletter.urls"))]\n'
    )
    (site / "hooks.py").write_text("def redeliver(msg):\n    return None\n")
    migrated = run(site, "manage.py", "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert "Applying admin." in migrated.stdout and "Applying deadletter." in migrated.stdout
    assert "deadletter.W001" in migrated.stderr + migrated.stdout  # stock SQLite: once, here
    checked = run(site, "manage.py", "check")
    assert checked.returncode == 0 and "W001" not in checked.stderr, checked.stderr
    parked = run(
        site,
        "manage.py",
        "shell",
        "-c",
        "from deadletter import Message, store_failed_msgs; "
        "print(store_failed_msgs('webhook-queue', Message(subject='order 1234')).hex())",
    )
    assert parked.returncode == 0 and "W001" not in parked.stderr, parked.stderr
    drained = run(site, "manage.py", "deadletter_drain", "--format", "json")
    assert drained.returncode == 0, drained.stderr
    assert '"delivered": 1' in drained.stdout and "W001" not in drained.stderr
