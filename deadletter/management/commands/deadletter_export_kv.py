"""`manage.py deadletter_export_kv PATH [--queue NAME ...] [--force]`."""

from __future__ import annotations

from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError

from deadletter.conf import conf
from deadletter.management.arguments import add_queue_argument
from deadletter.management.database import DatabaseCommand
from deadletter.management.progress import add_progress_argument, is_terminal, progress_bar
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
        parser.add_argument("path", type=Path, help="the SQLite file to write")
        add_queue_argument(
            parser, "export only this queue (repeat for several); default: every queue"
        )
        parser.add_argument(
            "--force",
            action="store_true",
            help="write into an SQLite file that also holds tables of another application",
        )
        add_progress_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        shown = options["progress"] and is_terminal(self.stderr)
        total = None
        if shown:
            rows = QueuedMessage.objects.using(conf.DATABASE)
            names = options["queues"]
            total = sum(rows.count_rows(n) for n in names) if names else rows.count()
        try:
            with progress_bar(
                self.stderr, total=total, desc="exporting", unit="row", enabled=shown
            ) as update:
                report = kvfile.export_kv(
                    options["path"],
                    queues=options["queues"],
                    force=options["force"],
                    on_rows=update,
                )
        except kvfile.KvFileError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(kvfile.format_report(report))
