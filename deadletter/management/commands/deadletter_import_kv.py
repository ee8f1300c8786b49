"""`manage.py deadletter_import_kv PATH [--queue NAME ...] [--dry-run]`."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from deadletter.management.database import DatabaseCommand
from deadletter.management.kv import add_kv_arguments, transfer
from deadletter.management.progress import add_progress_argument
from deadletter.transfer import kvfile


class Command(DatabaseCommand):
    help = (
        "Copy the queues of the Go program's kv SQLite file into the queue table. "
        "The file is opened read-only; a second run imports nothing twice."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        add_kv_arguments(
            parser,
            path_help="the Go program's SQLite file",
            queue_help="import only this queue (repeat for several); default: every queue",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="report what would be imported, write nothing"
        )
        add_progress_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        transfer(
            self,
            desc="importing",
            progress=options["progress"],
            count=lambda: kvfile.count_kv_rows(options["path"]),
            run=lambda on_rows: kvfile.import_kv(
                options["path"],
                queues=options["queues"],
                dry_run=options["dry_run"],
                on_rows=on_rows,
            ),
        )
