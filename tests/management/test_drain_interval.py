"""`deadletter_drain --forever --interval` below one second is refused: a service
with no pause between passes spins on the database."""

from __future__ import annotations

import pytest
from django.core.management.base import CommandError

from deadletter.management.commands.deadletter_drain import Command


def _parsed(*args: str) -> dict[str, object]:
    return vars(Command().create_parser("manage.py", "deadletter_drain").parse_args(args))


@pytest.mark.parametrize("given", ["0", "0.5", "0.999"])
def test_an_interval_below_one_second_is_refused(given: str) -> None:
    with pytest.raises(CommandError, match="at least 1 second between passes"):
        _parsed("--forever", "--interval", given)


def test_an_interval_of_one_second_or_more_is_taken() -> None:
    assert _parsed("--forever", "--interval", "1")["interval"] == 1.0
    assert _parsed("--forever", "--interval", "60")["interval"] == 60.0
