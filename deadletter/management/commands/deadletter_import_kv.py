"""`manage.py deadletter_import_kv PATH [--queue NAME ...] [--dry-run]`."""

from __future__ import annotations

from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError

from deadletter.management.arguments import add_queue_argument
from deadletter.management.database import DatabaseCommand
from deadletter.management.progress import add_progress_argument, is_terminal, progress_bar
from deadletter.transfer import kvfile


class Command(DatabaseCommand):
    help = (
        "Copy the queues of the Go program's kv SQLite file into the queue table. "
        "The file is opened read-only; a second run imports nothing twice."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("path", type=Path, help="the Go program's SQLite file")
        add_queue_argument(
            parser, "import only this queue (repeat for several); default: every queue"
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="report what would be imported, write nothing"
        )
        add_progress_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        shown = options["progress"] and is_terminal(self.stderr)
        try:
            total = kvfile.count_kv_rows(options["path"]) if shown else None
            with progress_bar(
                self.stderr, total=total, desc="importing", unit="row", enabled=shown
            ) as update:
                report = kvfile.import_kv(
                    options["path"],
                    queues=options["queues"],
                    dry_run=options["dry_run"],
                    on_rows=update,
                )
        except kvfile.KvFileError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(kvfile.format_report(report))
