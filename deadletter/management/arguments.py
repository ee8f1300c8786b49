"""Command-line pieces the deadletter commands share."""

from __future__ import annotations

from argparse import ArgumentParser, ArgumentTypeError

from deadletter.queue import search
from deadletter.wire import keys


def queue_name(value: str) -> str:
    """argparse `type=`: a queue name the key layout can hold."""
    try:
        keys.encode_queue_name(value)
    except ValueError as exc:
        raise ArgumentTypeError(str(exc)) from None
    return value


def search_text(value: str) -> str:
    """argparse `type=` of every `--search`: a search the language can run, else the
    usage error (exit status 2) saying what to change, the same in every command."""
    try:
        search.parse(value)
    except search.SearchError as exc:
        raise ArgumentTypeError(str(exc)) from None
    return value


def add_queue_argument(parser: ArgumentParser, help_text: str) -> None:
    """`--queue NAME`, repeatable, collected in `options["queues"]` (None when absent)."""
    parser.add_argument(
        "--queue", action="append", dest="queues", type=queue_name, metavar="NAME", help=help_text
    )
