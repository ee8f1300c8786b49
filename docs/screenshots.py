"""Retake the README's admin screenshots (1280x900) from a fresh demo.

    .venv/bin/python docs/screenshots.py

Builds a demo on a temporary SQLite file (migrate, `demo_seed`, a drain of the
webhook queue against an address where nothing listens, so its messages show
an attempt and a last error), serves it with `runserver`, and drives Debian's
Chromium through Playwright, the sidebar open on every page: the changelist,
a message page, the queue overview and a failed Celery task's page, into
docs/img/. Needs `pip install playwright` and `apt-get install -y chromium`
(never a browser download).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "img"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 900}


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(  # noqa: S603  (this interpreter, fixed arguments)
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(port: int) -> None:
    for _ in range(150):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"the demo server on port {port} did not start")


def main() -> None:
    OUT.mkdir(exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="deadletter-screenshots-"))
    env = dict(os.environ)
    env.pop("DATABASE_URL", None)
    env.update(
        DJANGO_SETTINGS_MODULE="project.settings",
        DJANGO_DEBUG="1",  # runserver serves the admin's static files
        DEADLETTER_SQLITE_PATH=str(workdir / "demo.sqlite3"),
        DEMO_WEBHOOK_URL="http://127.0.0.1:9/demo/webhook/",  # nothing listens: it fails
    )
    manage(env, "migrate", "--no-input")
    manage(env, "demo_seed")
    subprocess.run(
        [sys.executable, "manage.py", "deadletter_drain", "--queue", "webhook-queue"],
        cwd=REPO,
        env=env,
        capture_output=True,
        check=False,  # the drain reports failures by its exit status
    )
    login = manage(env, "demo_admin")
    found = re.search(r"user '([^']+)' password '([^']+)'", login)
    if found is None:
        raise SystemExit(f"no login in: {login!r}")
    user, password = found.groups()
    port = free_port()
    server = subprocess.Popen(  # noqa: S603  (this interpreter, fixed arguments)
        [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(port)
        shoot(f"http://127.0.0.1:{port}", user, password)
    finally:
        server.terminate()
        server.wait(timeout=10)


def shoot(base: str, user: str, password: str) -> None:
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(f"{base}/admin/login/")
        page.fill("#id_username", user)
        page.fill("#id_password", password)
        page.click("input[type=submit]")
        page.evaluate("localStorage.setItem('django.admin.navSidebarIsOpen', 'true')")
        page.goto(f"{base}/admin/deadletter/queuedmessage/")
        page.screenshot(path=OUT / "admin-list.png")
        width = page.evaluate("document.documentElement.scrollWidth")
        if width > VIEWPORT["width"]:
            raise SystemExit(f"the changelist is {width} px wide at 1280 px")
        page.get_by_role("link", name="webhook-queue").first.click()
        page.locator("#result_list tbody tr").first.locator("th a").click()
        page.screenshot(path=OUT / "admin-message.png")
        page.goto(f"{base}/admin/deadletter/queuedmessage/overview/")
        page.screenshot(path=OUT / "admin-overview.png")
        width = page.evaluate("document.documentElement.scrollWidth")
        if width > VIEWPORT["width"]:
            raise SystemExit(f"the overview is {width} px wide at 1280 px")
        page.get_by_role("link", name="celery.celery").first.click()
        page.locator("#result_list tbody tr").first.locator("th a").click()
        page.screenshot(path=OUT / "admin-celery-task.png", full_page=True)
        browser.close()
    for name in (
        "admin-list.png",
        "admin-message.png",
        "admin-overview.png",
        "admin-celery-task.png",
    ):
        sys.stdout.write(f"{OUT / name}\n")


if __name__ == "__main__":
    main()
