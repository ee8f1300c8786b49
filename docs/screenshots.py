"""Retake the README's screenshots from a running `./dev serve`.

    ./dev serve 127.0.0.1:8000 &      # prints the admin login
    .venv/bin/python docs/screenshots.py USER PASSWORD [BASE_URL]

Needs `pip install playwright` and Debian's chromium (/usr/bin/chromium).
"""

from __future__ import annotations

import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

OUT = Path(__file__).resolve().parent / "img"


def main() -> None:
    user, password = sys.argv[1], sys.argv[2]
    base = sys.argv[3] if len(sys.argv) > 3 else "http://127.0.0.1:8000"
    OUT.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path="/usr/bin/chromium",
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        page = browser.new_page(viewport={"width": 1500, "height": 700})
        page.goto(f"{base}/admin/login/")
        page.fill("#id_username", user)
        page.fill("#id_password", password)
        page.click("input[type=submit]")
        page.evaluate("localStorage.setItem('django.admin.navSidebarIsOpen', 'false')")
        page.goto(f"{base}/admin/deadletter/queuedmessage/")
        page.screenshot(path=OUT / "admin-list.png")
        page.click("#result_list tbody tr:first-child th a")
        page.screenshot(path=OUT / "admin-message.png", full_page=True)
        browser.close()


if __name__ == "__main__":
    main()
