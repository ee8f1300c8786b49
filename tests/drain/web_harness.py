"""Processes for the web drain's tests: a real WSGI server with ATOMIC_REQUESTS on,
a park from another process with a short busy timeout, and the handler they run.

Run as `python -m tests.drain.web_harness serve PORT_FILE` or `... park QUEUE SUBJECT`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any

from deadletter.wire.messages import Message
from tests.factories import REPO

USER, PASSWORD = "web-drain", "web-drain-pw"

SERVER_SETTINGS = """\
from project.settings import *  # noqa: F403
DEBUG = False
DATABASES["default"]["ATOMIC_REQUESTS"] = True  # noqa: F405
DEADLETTER_HANDLERS = {"q": "tests.drain.web_harness.recording_handler"}
DEADLETTER_ADMIN_TIME_BUDGET = 300
DEADLETTER_API_TIME_BUDGET = 300
"""

PARK_SETTINGS = """\
from project.settings import *  # noqa: F403
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):  # noqa: F405
    DATABASES["default"]["OPTIONS"]["timeout"] = 1  # noqa: F405  (a held write lock fails fast)
"""


def recording_handler(msg: Message) -> None:
    """Delivers `msg`: appends `pid subject` to $DRAIN_RECORD durably, then, for
    the subject $DRAIN_HANG_ON, hangs (delivered downstream, its row unsettled)."""
    fd = os.open(os.environ["DRAIN_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{os.getpid()} {msg.subject}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    if msg.subject == os.environ.get("DRAIN_HANG_ON"):
        time.sleep(600)


def deliveries(record: Path) -> list[str]:
    if not record.exists():
        return []
    return [line.split(" ", 1)[1] for line in record.read_text().splitlines() if " " in line]


def _settings_module(tmp: Path, name: str, text: str) -> dict[str, str]:
    (tmp / f"{name}.py").write_text(text)
    return {"PYTHONPATH": f"{REPO}:{tmp}", "DJANGO_SETTINGS_MODULE": name}


def park_elsewhere(env: dict[str, str], tmp: Path, queue: str, subject: str) -> str | None:
    """Park a message from another process whose SQLite busy timeout is 1 s; None
    when it was stored, else what the process said (e.g. "database is locked")."""
    child = {**env, **_settings_module(tmp, "web_park_settings", PARK_SETTINGS)}
    done = subprocess.run(
        [sys.executable, "-m", "tests.drain.web_harness", "park", queue, subject],
        cwd=REPO,
        env=child,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return None if done.returncode == 0 else done.stdout + done.stderr


class Server:
    """`project.wsgi`'s application behind wsgiref in a child process, on a free
    port, with ATOMIC_REQUESTS on and `recording_handler` on queue "q"."""

    def __init__(self, env: dict[str, str], tmp: Path, **extra: str) -> None:
        self.record = tmp / "record.txt"
        port_file = tmp / f"port-{time.monotonic_ns()}"
        self.log = tmp / f"server-{time.monotonic_ns()}.log"
        child = {
            **env,
            **_settings_module(tmp, "web_server_settings", SERVER_SETTINGS),
            "DRAIN_RECORD": str(self.record),
            **extra,
        }
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.drain.web_harness", "serve", str(port_file)],
                cwd=REPO,
                env=child,
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            assert self.proc.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.02)
        self.base = f"http://127.0.0.1:{port_file.read_text().strip()}"
        self.answers: list[Any] = []

    def post_in_background(self, start: Any) -> threading.Thread:
        """Run `start(self)` (a request the kill will cut) in a thread; what it
        answered, or the error it met, goes to `answers`."""

        def run() -> None:
            try:
                self.answers.append(start(self))
            except (OSError, urllib.error.URLError) as exc:
                self.answers.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    def api_drain(self, queue: str, limit: int, token: str) -> Any:
        """A drain through the API, authenticated by a DRF token."""
        request = urllib.request.Request(
            f"{self.base}/api/deadletter/queues/{queue}/drain/",
            data=json.dumps({"limit": limit}).encode(),
            headers={
                "Content-Type": "application/json",
                "Authorization": f"Token {token}",
            },
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=600) as response:
            return json.loads(response.read())

    def admin_drain(self, queue: str, limit: int) -> Any:
        """Log in to the admin as a browser would, then confirm a drain."""
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
        login = f"{self.base}/admin/login/"
        token = _csrf_token(opener.open(login, timeout=60).read().decode())
        fields = {"username": USER, "password": PASSWORD, "next": "/admin/"}
        opener.open(login, _form(fields, token), timeout=60).read()
        page = f"{self.base}/admin/deadletter/queuedmessage/overview/drain/"
        token = _csrf_token(opener.open(page, timeout=60).read().decode())
        with opener.open(page, _form({"queue": queue, "limit": str(limit)}, token), timeout=600):
            return "done"

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=60)


def _csrf_token(page: str) -> str:
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert found, page[:2000]
    return found.group(1)


def _form(fields: dict[str, str], token: str) -> bytes:
    return urllib.parse.urlencode({**fields, "csrfmiddlewaretoken": token}).encode()


def _serve(port_file: str) -> None:
    from wsgiref.simple_server import make_server

    from django.core.wsgi import get_wsgi_application

    with make_server("127.0.0.1", 0, get_wsgi_application()) as server:
        Path(port_file).write_text(str(server.server_port))
        server.serve_forever()


def _park(queue: str, subject: str) -> None:
    import django

    django.setup()
    from deadletter.queue import store_failed_msgs

    store_failed_msgs(queue, Message(subject=subject))


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        _serve(sys.argv[2])
    else:
        _park(sys.argv[2], sys.argv[3])
