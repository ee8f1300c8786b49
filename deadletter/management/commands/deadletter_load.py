"""`manage.py deadletter_load FILE`: put the rows of an NDJSON dump back, keys kept.

Every line is checked before anything is written: a malformed line is named
with its number and nothing of the file is loaded. A row whose key is already
queued is left alone, so loading the same file twice adds nothing.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import IO, Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from deadletter import ndjson
from deadletter.progress import add_progress_argument, progress_bar


class Command(BaseCommand):
    help = "Load an NDJSON dump (deadletter_dump) into the queue, keeping each row's key."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", metavar="FILE", help="The dump to load; - reads stdin.")
        add_progress_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        name, enabled = options["file"], options["progress"]
        source: str | IO[str] = sys.stdin if name == "-" else name
        size = None if name == "-" else _size(name)
        try:
            with tempfile.TemporaryFile(prefix="deadletter-load-") as spool:
                with progress_bar(
                    self.stderr, total=size, desc="checking", unit="B", enabled=enabled
                ) as tick:
                    rows = ndjson.check(source, spool, on_bytes=tick)
                with progress_bar(self.stderr, total=rows, desc="loading", enabled=enabled) as tick:
                    inserted = ndjson.insert(spool, on_row=tick)
        except ndjson.LoadError as exc:
            raise CommandError(f"{name}: {exc}; nothing was loaded") from None
        except OSError as exc:
            raise CommandError(f"could not read {name}: {exc}") from exc
        except DatabaseError as exc:
            raise CommandError(
                f"could not write the queue: {exc}; the batches committed before stay, "
                "and loading the file again adds only the rest"
            ) from exc
        self.stdout.write(
            f"Loaded {inserted} new row(s) of {rows} in {name} ({rows - inserted} already queued)."
        )


def _size(path: str) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None
