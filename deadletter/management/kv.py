"""What `deadletter_import_kv` and `deadletter_export_kv` share: the file and
`--queue` arguments, and one transfer run under a progress bar with its report
on stdout, a `KvFileError` said as a `CommandError`."""

from __future__ import annotations

from argparse import ArgumentParser
from collections.abc import Callable
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from deadletter.management.arguments import add_queue_argument
from deadletter.management.progress import is_terminal, progress_bar
from deadletter.transfer import kvfile

__all__ = ["add_kv_arguments", "transfer"]


def add_kv_arguments(parser: ArgumentParser, *, path_help: str, queue_help: str) -> None:
    """The kv file's path and the queues to copy (every queue when none is named)."""
    parser.add_argument("path", type=Path, help=path_help)
    add_queue_argument(parser, queue_help)


def transfer(
    command: BaseCommand,
    *,
    desc: str,
    progress: bool,
    count: Callable[[], int],
    run: Callable[[Callable[[int], None]], kvfile.Report],
) -> None:
    """`run(on_rows)` under a bar of `count()` rows (counted only when the bar
    is shown on a terminal), then its report on stdout; the file's problems end
    the command with their own words."""
    shown = progress and is_terminal(command.stderr)
    try:
        total = count() if shown else None
        with progress_bar(
            command.stderr, total=total, desc=desc, unit="row", enabled=shown
        ) as update:
            report = run(update)
    except kvfile.KvFileError as exc:
        raise CommandError(str(exc)) from exc
    command.stdout.write(kvfile.format_report(report))
