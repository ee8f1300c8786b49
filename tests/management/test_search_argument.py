"""Every command that takes `--search` checks it the same way: a search that cannot
run is a usage error, exit status 2, in the search language's own words."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import ManagementUtility, get_commands, load_command_class

from deadletter.queue.search import SearchError, parse

pytestmark = pytest.mark.django_db


def commands_with_a_search() -> list[str]:
    """The app's commands whose help offers `--search`."""
    found = []
    for name, app in sorted(get_commands().items()):
        if name.startswith("deadletter_"):
            parser = load_command_class(app, name).create_parser("manage.py", name)
            if "--search" in parser.format_help():
                found.append(name)
    return found


def test_the_commands_with_a_search_are_known() -> None:
    assert commands_with_a_search() == ["deadletter_dump", "deadletter_redrive"]


@pytest.mark.parametrize("text", ['subject:"open', "error:>500", "code:>3", "attempts:>x"])
def test_a_malformed_search_exits_two_in_its_own_words(text: str, capsys: Any) -> None:
    with pytest.raises(SearchError) as refused:
        parse(text)
    for command in commands_with_a_search():
        with pytest.raises(SystemExit) as exited:
            ManagementUtility(["manage.py", command, "--queue", "q", "--search", text]).execute()
        assert exited.value.code == 2, command
        assert f"argument --search: {refused.value}" in capsys.readouterr().err, command
