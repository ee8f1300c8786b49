"""`manage.py deadletter_import_kv PATH [--queue NAME ...] [--dry-run]`."""

from __future__ import annotations

from argparse import ArgumentParser, ArgumentTypeError
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from deadletter import keys, kvfile


def queue_name(value: str) -> str:
    """argparse `type=`: a queue name the key layout can hold."""
    try:
        keys.encode_queue_name(value)
    except ValueError as exc:
        raise ArgumentTypeError(str(exc)) from exc
    return value


class Command(BaseCommand):
    help = (
        "Copy the queues of the Go program's kv SQLite file into the queue table. "
        "The file is opened read-only; a second run imports nothing twice."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("path", type=Path, help="the Go program's SQLite file")
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            type=queue_name,
            metavar="NAME",
            help="import only this queue (repeat for several); default: every queue",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="report what would be imported, write nothing"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = kvfile.import_kv(
                options["path"], queues=options["queues"], dry_run=options["dry_run"]
            )
        except kvfile.KvFileError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(kvfile.format_report(report))
