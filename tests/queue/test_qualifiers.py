"""The search language's qualifier table holds every place a user reads about the
language: the grammar reads what it says, and each help text, met the way a user
meets it (the admin's pages, the API's schema, `manage.py … --help`, the docs),
names every qualifier of the table and no other."""

from __future__ import annotations

import html
import re
import subprocess
import sys
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from deadletter.queue.search import SearchError, parse, qualifiers
from deadletter.queue.search.query import Phrase
from tests.factories import REPO

EVERY = qualifiers.NAMES | {qualifiers.OTHER_KEY.name}
# A qualifier named in prose: `name:` then its value or a separator, never a space
# (`The search: whole words` names none).
_NAMED = re.compile(r"(?<![\w./-])([A-Za-z_]\w*):(?![\s]|$)")


def named(text: str) -> set[str]:
    """The qualifiers `text` names (`subject:`, `attempts:>3`, `NAME:value`)."""
    return set(_NAMED.findall(html.unescape(text)))


def assert_names_the_table(where: str, text: str) -> None:
    found = named(text)
    assert found == EVERY, (
        f"{where} names {sorted(found - EVERY)} beyond the table and misses "
        f"{sorted(EVERY - found)}: {text!r}"
    )


def test_the_table_names_each_qualifier_once_in_lowercase() -> None:
    names = [qualifier.name for qualifier in qualifiers.QUALIFIERS]
    assert len(names) == len(set(names)) == len(qualifiers.NAMES)
    assert all(name == name.casefold() for name in names)
    assert qualifiers.OTHER_KEY.name not in qualifiers.NAMES


@pytest.mark.django_db
@pytest.mark.parametrize(
    "example",
    [e for q in qualifiers.QUALIFIERS for e in q.examples if "…" not in e] + ['cause:"x"'],
)
def test_every_example_of_the_table_parses_as_its_qualifier(settings: Any, example: str) -> None:
    settings.DEADLETTER_EVENT_CODES = {3: "FINAL_GRADE"}
    query = parse(example)
    assert not any(
        isinstance(c, Phrase) and (c.field or "").startswith("key:") for c in query.conditions
    ), f"{example} reads as a key of the message, not as its qualifier"


@pytest.mark.django_db
@pytest.mark.parametrize("example", qualifiers.OTHER_KEY.examples)
def test_any_other_name_is_a_key_of_the_message(example: str) -> None:
    (condition,) = parse(example).conditions
    assert isinstance(condition, Phrase)
    assert condition.field == "key:" + example.split(":")[0].casefold()


def test_only_the_compared_qualifiers_read_a_comparison() -> None:
    for qualifier in qualifiers.QUALIFIERS:
        if qualifier.compared:
            continue
        with pytest.raises(SearchError, match="takes no comparison"):
            parse(f"{qualifier.name}:>3")


def test_the_one_line_help_names_the_table() -> None:
    assert_names_the_table("qualifiers.help_text()", qualifiers.help_text())
    assert_names_the_table("qualifiers.summary()", qualifiers.summary())


def test_docs_search_md_holds_the_table_as_rendered() -> None:
    page = (REPO / "docs" / "search.md").read_text()
    assert qualifiers.markdown_table() in page, "render it: qualifiers.markdown_table()"


# The edges: each help text as its page, schema or command shows it.


def helps_in(page: str, marker: str) -> list[str]:
    """The texts of the help elements with id `marker` on an admin page."""
    return re.findall(rf'id="{marker}"[^>]*>(.*?)</div>', page, re.DOTALL)


@pytest.mark.django_db
def test_the_admin_lists_search_boxes_name_the_table(admin_client: Any) -> None:
    for where, url in [
        ("the queued messages' search box", "/admin/deadletter/queuedmessage/"),
        ("the archive's search box", "/admin/deadletter/archivedmessage/"),
    ]:
        response = admin_client.get(url)
        assert response.status_code == 200, url
        (text,) = helps_in(response.content.decode(), "searchbar_helptext")
        assert_names_the_table(where, text)


@pytest.mark.django_db
def test_the_admin_redrive_plans_search_field_names_the_table(
    admin_client: Any, settings: Any
) -> None:
    settings.DEADLETTER_HANDLERS = {"webhooks": "tests.factories.ok_handler"}
    response = admin_client.get("/admin/deadletter/redrive/plan/", {"queue": "webhooks"})
    assert response.status_code == 200
    (text,) = helps_in(response.content.decode(), "id_search_helptext")
    assert_names_the_table("the redrive plan's search field", text)


def search_descriptions(schema: dict[str, Any]) -> dict[str, str]:
    """The description of every search a client sends, by where it is: each `q`
    query parameter, and each `search` or `q` property of a request body."""
    found = {}
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []) if isinstance(operation, dict) else []:
                if parameter.get("in") == "query" and parameter.get("name") == "q":
                    found[f"{method.upper()} {path} ?q="] = parameter.get("description", "")
    for name, component in schema["components"]["schemas"].items():
        if not name.endswith("Request"):
            continue
        for field in ("search", "q"):
            if field in component.get("properties", {}):
                found[f"{name}.{field}"] = component["properties"][field].get("description", "")
    return found


@pytest.mark.django_db
def test_the_openapi_schema_describes_each_search_by_the_table() -> None:
    client = APIClient()
    client.force_login(User.objects.create_superuser("root"))
    response = client.get("/api/deadletter/schema/", {"format": "json"})
    assert response.status_code == 200
    found = search_descriptions(response.json())
    assert any("/messages/" in where for where in found), sorted(found)
    assert any(where.startswith("Redrive") for where in found), sorted(found)
    for where, text in found.items():
        assert_names_the_table(f"the schema's {where}", text)


def search_help(command: str) -> str:
    """The `--search` option's help as `manage.py COMMAND --help` prints it."""
    printed = subprocess.run(
        [sys.executable, "manage.py", command, "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    found = re.search(r"^\s+--search \S+\s+(.*?)(?=^\s+-|\Z)", printed, re.DOTALL | re.MULTILINE)
    assert found, printed
    return " ".join(found[1].split())


@pytest.mark.parametrize("command", ["deadletter_redrive", "deadletter_dump"])
def test_each_commands_search_help_names_the_table(command: str) -> None:
    assert_names_the_table(f"manage.py {command} --help", search_help(command))
