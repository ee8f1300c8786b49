"""The README's install recipe in a brand-new `startproject` site, as a newcomer
follows it: its exact lines, read from README.md at test time — the settings and
URL blocks appended, `migrate`, the quick start's message parked, its handler
named, a drain — then the Prometheus endpoint and the REST API answering. On a
server, the scale-out recipe in the same site drains with four workers there.

With DEADLETTER_TEST_WHEEL set to a built wheel (`.ci/package` sets it), the site
runs in a fresh venv made by the README's own `pip install` line against that
wheel, and imports the app, its compiled speed-up in use, from there."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import database_url
from tests.factories import REPO
from tests.test_readme import CHECKOUT, DOCS, README, Snippet, section, serving, snippets

pytestmark = pytest.mark.slow

WHEEL = os.environ.get("DEADLETTER_TEST_WHEEL")
TOKEN = "startproject-metrics-token"
# What the quick start's park block leaves to the reader's code.
CALLER = """
class DeliveryError(Exception):
    pass

payload = {"order": 1234}
payload_json = '{"order": 1234}'

def send_webhook(payload):
    raise DeliveryError("503")
"""


def run(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_URL"))}
    env["PYTHONPATH"] = f"{site}:{REPO}"
    return subprocess.run(
        [sys.executable, *args], cwd=site, env=env, capture_output=True, text=True, timeout=120
    )


@dataclass
class Reader:
    """A newcomer at a shell: pastes shell lines (`cd` moves them) and appends blocks
    to the files their first line names, with `python` on PATH being `python`."""

    cwd: Path
    python: Path
    env: dict[str, str]

    def call(self, *argv: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv,
            cwd=self.cwd,
            env={**self.env, **extra},
            capture_output=True,
            text=True,
            timeout=600,
        )

    def sh(self, line: str, **extra: str) -> subprocess.CompletedProcess[str]:
        if line.startswith("cd "):
            self.cwd = self.cwd / line[3:].strip()
            return subprocess.CompletedProcess(line, 0, "", "")
        return self.call("bash", "-c", line, **extra)

    def paste(self, snippet: Snippet) -> None:
        target = self.cwd / snippet.path
        assert (target.parent / "__init__.py").exists(), f"{target} is not in the site's package"
        with target.open("a") as out:
            out.write("\n" + snippet.text)

    def shell(self, code: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return self.call(str(self.python), "manage.py", "shell", "-v", "0", "-c", code, **extra)


def fresh_env(bin_dir: Path, pythonpath: str | None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "DATABASE_URL", "PYTHONPATH", "VIRTUAL_ENV"))
    }
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


@pytest.fixture(scope="module")
def interpreter(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """This venv's Python with the checkout on its path, or a fresh venv that the
    README's `pip install` line filled from the wheel under test."""
    if not WHEEL:
        python = Path(sys.executable)
        return python, fresh_env(python.parent, str(REPO))
    target = tmp_path_factory.mktemp("wheel") / "venv"
    venv.create(target, with_pip=True)
    installer = Reader(target.parent, target / "bin" / "python", fresh_env(target / "bin", None))
    (line,) = [s.text for s in snippets(section(README, "Install")) if "pip install" in s.text]
    installed = installer.sh(line.replace(CHECKOUT, str(Path(WHEEL).resolve())))
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return installer.python, installer.env


@pytest.fixture
def reader(tmp_path: Path, interpreter: tuple[Path, dict[str, str]]) -> Reader:
    """A shell in an empty folder."""
    python, env = interpreter
    return Reader(tmp_path, python, env)


def set_up_site(reader: Reader, webhook_url: str) -> dict[str, str]:
    """The README's Install and Quick start as written, in order: files pasted, shell
    lines run (each must succeed), the park block run as the reader's code; what
    each command printed."""
    printed: dict[str, str] = {}
    for title in ("Install", "Quick start"):
        for snippet in snippets(section(README, title)):
            if snippet.kind == "file":
                reader.paste(snippet)
                if snippet.path == "mysite/hooks.py":  # it redelivers to this test's endpoint
                    reader.paste(Snippet("file", f"WEBHOOK_URL = {webhook_url!r}\n", snippet.path))
            elif snippet.kind == "python":
                parked = reader.shell(CALLER + snippet.text)
                assert parked.returncode == 0 and "W001" not in parked.stderr, parked.stderr
            elif not snippet.text.startswith("pip install"):  # the `interpreter`'s job
                done = reader.sh(snippet.text, DEADLETTER_METRICS_TOKEN=TOKEN)
                assert done.returncode == 0, f"{snippet.text}\n{done.stdout}{done.stderr}"
                printed[snippet.text] = done.stdout + done.stderr
    return printed


def test_the_readmes_install_recipe_runs_as_written_in_a_fresh_startproject_site(
    reader: Reader,
) -> None:
    with serving() as endpoint:
        printed = set_up_site(reader, endpoint["url"])
        migrated = printed["python manage.py migrate"]
        assert "Applying admin." in migrated and "Applying deadletter." in migrated
        assert "Applying authtoken." in migrated  # the REST API's apps are installed
        assert migrated.count("deadletter.W001") == 1  # stock SQLite: warned once, here
        checked = reader.sh("python manage.py check")
        assert checked.returncode == 0 and "W001" not in checked.stderr, checked.stderr
        assert "System check identified no issues" in checked.stdout
        drained = printed["python manage.py deadletter_drain"]
        assert endpoint["bodies"] == [b'{"order": 1234}']  # the park block, delivered
        assert "W001" not in drained, drained
    left = reader.shell(
        "from deadletter import fetch_failed_msgs; print(fetch_failed_msgs('webhook-queue'))"
    )
    assert left.stdout.strip() == "[]", left.stderr
    answered = reader.shell(
        "from django.test import Client\n"
        "c = Client(HTTP_HOST='localhost')\n"
        f"m = c.get('/deadletter/metrics', headers={{'Authorization': 'Bearer {TOKEN}'}})\n"
        "print(m.status_code, b'# TYPE deadletter_queue_depth gauge' in m.content)\n"
        "print(c.get('/api/deadletter/queues/').status_code)\n"
        "print(c.get('/api/deadletter/schema/', {'format': 'json'}).status_code)\n",
        DEADLETTER_METRICS_TOKEN=TOKEN,
    )
    assert answered.returncode == 0, answered.stderr
    metrics, queues, schema = answered.stdout.split("\n")[:3]
    assert metrics == "200 True"
    assert queues in ("401", "403")  # mounted, and asks who is calling
    assert schema in ("401", "403")


@pytest.mark.skipif(not WHEEL, reason="DEADLETTER_TEST_WHEEL names no wheel (.ci/package does)")
def test_the_wheel_installs_with_its_compiled_speedup_in_use(reader: Reader) -> None:
    found = reader.call(
        str(reader.python),
        "-c",
        "import deadletter, deadletter.wire._speedups as c\n"
        "from deadletter.wire import codec\n"
        "assert codec._go_message is c.go_message and codec._go_decode is c.go_decode\n"
        "print(deadletter.__file__)\nprint(c.__file__)\n",
    )
    assert found.returncode == 0, found.stderr
    package, compiled = (Path(line) for line in found.stdout.split())
    assert package.is_relative_to(reader.python.parent.parent), package  # not the checkout
    assert compiled.suffix == ".so"


@pytest.mark.django_db(transaction=True)
def test_the_scale_out_recipe_drains_on_the_server_with_four_workers(reader: Reader) -> None:
    from django.db import connection

    from deadletter.models import QueuedMessage

    if connection.vendor == "sqlite" or WHEEL:
        pytest.skip("the scale-out recipe is for PostgreSQL and MySQL/MariaDB")
    servers = section(DOCS[REPO / "docs" / "operations.md"], "Servers and containers")
    (settings,) = [s for s in snippets(servers) if "dj_database_url" in s.text]
    scale_out = snippets(section(README, "How to scale out"))
    (drain,) = [s.text for s in scale_out if s.kind == "shell"]
    with serving() as endpoint:
        set_up_site(reader, endpoint["url"])  # on the site's SQLite file, as a newcomer starts
        endpoint["bodies"].clear()
        reader.paste(settings)
        server = {"DATABASE_URL": database_url()}
        parked = reader.shell(
            "from deadletter import Message, store_failed_msgs\n"
            "for n in range(20):\n"
            "    store_failed_msgs('webhook-queue', Message(subject=str(n), fields=[str(n)]))\n",
            **server,
        )
        assert parked.returncode == 0, parked.stderr
        assert QueuedMessage.objects.count() == 20  # on the server this test reads
        drained = reader.sh(drain, **server)
        assert drained.returncode == 0, drained.stdout + drained.stderr
    assert sorted(endpoint["bodies"]) == sorted(str(n).encode() for n in range(20))
    assert QueuedMessage.objects.count() == 0
