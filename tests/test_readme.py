"""The README's recipes, run as written: the handler example delivers, drops on
410 and retries on other errors; every `pip install` of the app names a checkout
and extras that exist; every link goes somewhere; the Prometheus recipe answers
on the demo project. The snippets are read from the files at test time
(`snippets`), so a test runs what a reader pastes, never a copy of it."""

from __future__ import annotations

import http.server
import re
import threading
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from deadletter import Message, PermanentFailure
from tests.factories import REPO

README = (REPO / "README.md").read_text()
DOCS = {p: p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]}
# The README and the pages its detail moved to.
FRONT = [
    "README.md",
    "python-api.md",
    "operations.md",
    "integrations.md",
    "api.md",
    "reliability.md",
    "contributing.md",
]
CHECKOUT = "/path/to/deadletter"
# The README is the front page: what the app is, the install, a tour, the settings, scaling out.
README_LINES = 250


def python_block(text: str, containing: str) -> str:
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", text, re.DOTALL) if containing in b]
    return block


def section(text: str, title: str) -> str:
    """The text under the heading `title`, up to the next heading of its level or
    above (a `#` line inside a fenced block is code, not a heading)."""
    lines = text.splitlines(keepends=True)
    fenced, level, start = False, 0, None
    for n, line in enumerate(lines):
        fenced ^= line.startswith("```")
        heading = re.match(r"(#+) (.*)\n", line) if not fenced else None
        if heading and start is not None and len(heading.group(1)) <= level:
            return "".join(lines[start:n])
        if heading and start is None and heading.group(2) == title:
            level, start = len(heading.group(1)), n + 1
    assert start is not None, f"no section {title!r}"
    return "".join(lines[start:])


@dataclass(frozen=True)
class Snippet:
    """One thing a reader pastes: a shell line, a Python block to append to a site's
    file (its first line names it: `# mysite/settings.py`), or a Python block to run."""

    kind: str  # "shell", "file" or "python"
    text: str
    path: str = ""


def snippets(text: str) -> list[Snippet]:
    """The snippets of `text` in reading order: each line of an indented block, each
    fenced Python block."""
    found = []
    pattern = r"^```python\n(.*?)^```|^((?:    [^\n]*\n)+)"
    for fenced, indented in re.findall(pattern, text, re.DOTALL | re.MULTILINE):
        if fenced:
            first = fenced.splitlines()[0]
            tagged = re.fullmatch(r"# (mysite/\S+\.py)", first)
            found.append(
                Snippet("file", fenced, tagged.group(1)) if tagged else Snippet("python", fenced)
            )
        else:
            found += [Snippet("shell", line[4:]) for line in indented.splitlines()]
    return found


@contextmanager
def serving() -> Iterator[dict[str, Any]]:
    """A local webhook endpoint answering each POST with the status it is told."""
    state: dict[str, Any] = {"status": 200, "bodies": []}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            state["bodies"].append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(state["status"])
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state["url"] = f"http://127.0.0.1:{server.server_port}/orders"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def endpoint() -> Iterator[dict[str, Any]]:
    with serving() as state:
        yield state


def test_the_handler_example_delivers_drops_a_gone_endpoint_and_retries_the_rest(
    endpoint: dict[str, Any],
) -> None:
    scope: dict[str, Any] = {}
    exec(python_block(README, "def redeliver"), scope)  # the README's own code
    scope["WEBHOOK_URL"] = endpoint["url"]
    msg = Message(subject="order 1234", fields=['{"order": 1234}'])
    assert scope["redeliver"](msg) is None
    assert endpoint["bodies"] == [b'{"order": 1234}']
    endpoint["status"] = 410
    with pytest.raises(PermanentFailure):
        scope["redeliver"](msg)
    endpoint["status"] = 503
    with pytest.raises(Exception, match="503"):
        scope["redeliver"](msg)


def test_every_pip_install_of_the_app_names_a_checkout_and_extras_that_exist() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = set(project["optional-dependencies"])
    found = [
        spec
        for text in DOCS.values()
        for spec in re.findall(r"pip install ['\"]?([^\s'\"]+)", text)
        if "[" in spec or "deadletter" in spec
    ]
    assert found
    for spec in found:
        name, _, rest = spec.partition("[")
        # Not a distribution name: it is not published, so pip could not find it.
        assert name == CHECKOUT, spec
        assert rest.endswith("]") and set(rest[:-1].split(",")) <= extras, spec
    (install,) = [s.text for s in snippets(section(README, "Install")) if "pip install" in s.text]
    assert install == f'pip install "{CHECKOUT}[api,prometheus]"'  # quoted: brackets are a glob


def test_the_readme_stays_a_front_page() -> None:
    assert len(README.splitlines()) <= README_LINES


def anchors(text: str) -> set[str]:
    """The fragments a Markdown page answers to: GitHub's heading slugs and explicit ids."""
    found = set(re.findall(r'<a id="([^"]+)"', text))
    for heading in re.findall(r"^#+ (.+)$", text, re.MULTILINE):
        found.add(re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-"))
    return found


@pytest.mark.parametrize("page", [p for p in DOCS if p.name in FRONT], ids=lambda p: p.name)
def test_every_link_of_a_page_goes_to_a_file_and_heading_that_exist(page: Path) -> None:
    text = re.sub(r"```.*?```", "", DOCS[page], flags=re.DOTALL)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, fragment = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name}: {target}"
        if fragment and linked.suffix == ".md":
            assert fragment in anchors(linked.read_text()), f"{page.name}: {target}"


@pytest.mark.django_db
def test_the_prometheus_recipe_answers_on_the_demo_project(client) -> None:
    response = client.get(
        "/deadletter/metrics", headers={"Authorization": "Bearer demo-metrics-token"}
    )
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    assert b"# TYPE deadletter_queue_depth gauge" in response.content
