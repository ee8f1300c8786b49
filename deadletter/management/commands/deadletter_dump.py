"""`manage.py deadletter_dump [--queue NAME ...] [--search S] [--redact] [-o FILE]`:
every message (or those a search matches) as NDJSON (`deadletter.transfer.ndjson`),
to reproduce a failure elsewhere; values DEADLETTER_REDACT names kept unless `--redact`."""

from __future__ import annotations

import os
import tempfile
from typing import Any

from django.core.management.base import CommandError, CommandParser

from deadletter.management.arguments import add_queue_argument, search_text
from deadletter.management.database import DatabaseCommand
from deadletter.management.progress import add_progress_argument, progress_bar
from deadletter.management.queues import require_known_queues
from deadletter.queue import search
from deadletter.queue.search import qualifiers
from deadletter.transfer import ndjson


class Command(DatabaseCommand):
    help = (
        "Write every message of the chosen queues (default: all) as NDJSON, one row a "
        "line with its key, to FILE or stdout."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_queue_argument(parser, "Dump only this queue (repeatable); default: every queue.")
        parser.add_argument(
            "-o", "--output", metavar="FILE", help="Write to FILE (replaced only when complete)."
        )
        parser.add_argument(
            "--search",
            metavar="S",
            default="",
            type=search_text,
            help=f"Only the messages this search matches. {qualifiers.help_text()}",
        )
        parser.add_argument(
            "--redact",
            action="store_true",
            help="Mask what DEADLETTER_REDACT names, as the admin does for a user who may "
            "not see it (and leave out the corrupt rows of those queues); by default a "
            "dump keeps every value, to reproduce a failure.",
        )
        add_progress_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        queues, path = options["queues"], options["output"]
        # Checked by `search_text` already: a malformed search exits 2 before this.
        self.query = query = search.parse(options["search"])
        self.redact = bool(options["redact"])
        try:
            require_known_queues(queues)
            if path is None:
                # The bar goes to stderr; stdout carries nothing but the dump.
                with self._bar(queues, options["progress"]) as tick:
                    ndjson.dump(self.stdout, queues, query=query, on_row=tick, redact=self.redact)
                return
            written = self._to_file(path, queues, options["progress"])
        except OSError as exc:
            raise CommandError(f"could not write {path}: {exc}") from exc
        self.stderr.write(f"Dumped {written} row(s) to {path}")

    def _bar(self, queues: list[str] | None, enabled: bool) -> Any:
        # A search's matches are not counted ahead: the bar counts up, with no total.
        total = ndjson.dump_total(queues) if enabled and not self.query else None
        return progress_bar(self.stderr, total=total, desc="dumping", enabled=enabled)

    def _to_file(self, path: str, queues: list[str] | None, enabled: bool) -> int:
        directory = os.path.dirname(os.path.abspath(path))
        fd, temp = tempfile.mkstemp(prefix=".deadletter-dump-", dir=directory)
        try:
            with (
                os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out,
                self._bar(queues, enabled) as tick,
            ):
                written = ndjson.dump(
                    out, queues, query=self.query, on_row=tick, redact=self.redact
                )
            os.replace(temp, path)
        except BaseException:
            os.unlink(temp)
            raise
        return written
