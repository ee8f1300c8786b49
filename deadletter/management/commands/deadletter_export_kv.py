"""`manage.py deadletter_export_kv PATH [--queue NAME ...] [--force]`."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from deadletter.conf import conf
from deadletter.management.database import DatabaseCommand
from deadletter.management.kv import add_kv_arguments, transfer
from deadletter.management.progress import add_progress_argument
from deadletter.models import QueuedMessage
from deadletter.transfer import kvfile


class Command(DatabaseCommand):
    help = (
        "Write the queues into a kv SQLite file the Go program reads (created if missing), "
        "one row per message. A second run writes nothing twice. A legacy row the file holds "
        "for an exported queue is split there first. Refuses this project's own database, and "
        "a file with tables of another application unless --force."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        add_kv_arguments(
            parser,
            path_help="the SQLite file to write",
            queue_help="export only this queue (repeat for several); default: every queue",
        )
        parser.add_argument(
            "--force",
            action="store_true",
            help="write into an SQLite file that also holds tables of another application",
        )
        add_progress_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        def count() -> int:
            rows = QueuedMessage.objects.using(conf.DATABASE)
            names = options["queues"]
            return sum(rows.count_rows(n) for n in names) if names else rows.count()

        transfer(
            self,
            desc="exporting",
            progress=options["progress"],
            count=count,
            run=lambda on_rows: kvfile.export_kv(
                options["path"], queues=options["queues"], force=options["force"], on_rows=on_rows
            ),
        )
