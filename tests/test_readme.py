"""The README's recipes, run as written: the handler example delivers, drops on
410 and retries on other errors; every `pip install` names the distribution
and extras that exist; the Prometheus recipe answers on the demo project."""

from __future__ import annotations

import http.server
import re
import threading
import tomllib
from collections.abc import Iterator
from typing import Any

import pytest

from deadletter import Message, PermanentFailure
from tests.factories import REPO

README = (REPO / "README.md").read_text()
DOCS = [README, *(p.read_text() for p in (REPO / "docs").glob("*.md"))]


def python_block(text: str, containing: str) -> str:
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", text, re.DOTALL) if containing in b]
    return block


@pytest.fixture
def endpoint() -> Iterator[dict[str, Any]]:
    """A local webhook endpoint answering each POST with the status it is told."""
    state: dict[str, Any] = {"status": 200, "bodies": []}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            state["bodies"].append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(state["status"])
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state["url"] = f"http://127.0.0.1:{server.server_port}/orders"
    yield state
    server.shutdown()


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


def test_every_pip_install_names_the_distribution_and_extras_that_exist() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = set(project["optional-dependencies"])
    found = [m for text in DOCS for m in re.findall(r"pip install ['\"]?([^\s'\"]+)", text)]
    with_extras = [spec for spec in found if "[" in spec]
    assert with_extras
    for spec in with_extras:
        name, _, rest = spec.partition("[")
        assert name in (project["name"], "./deadletter-checkout"), spec
        assert set(rest.rstrip("]").split(",")) <= extras, spec


@pytest.mark.django_db
def test_the_prometheus_recipe_answers_on_the_demo_project(client) -> None:
    response = client.get(
        "/deadletter/metrics", headers={"Authorization": "Bearer demo-metrics-token"}
    )
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    assert b"# TYPE deadletter_queue_depth gauge" in response.content
