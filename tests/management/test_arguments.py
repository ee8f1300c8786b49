from __future__ import annotations

from argparse import ArgumentParser

import pytest

from deadletter.management.arguments import add_queue_argument


def parser() -> ArgumentParser:
    p = ArgumentParser()
    add_queue_argument(p, "a queue")
    return p


def test_queue_argument_repeats_into_a_list() -> None:
    assert parser().parse_args(["--queue", "a", "--queue", "b"]).queues == ["a", "b"]


def test_no_queue_argument_means_every_queue() -> None:
    assert parser().parse_args([]).queues is None


@pytest.mark.parametrize("bad", ["", "a\x00b", "x" * 256])
def test_a_queue_name_the_key_cannot_hold_is_a_usage_error(bad: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parser().parse_args(["--queue", bad])
    assert exit_info.value.code == 2
    assert "queue name" in capsys.readouterr().err
