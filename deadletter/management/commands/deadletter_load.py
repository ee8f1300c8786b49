"""`manage.py deadletter_load FILE`: put the rows of an NDJSON dump back, keys kept.

Every line is checked before anything is written: a malformed line is named
with its number and nothing of the file is loaded. A row whose key is already
queued is left alone, so loading the same file twice adds nothing.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from typing import Any

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
        path = options["file"]
        spooled = None
        try:
            if path == "-":
                # Loading reads the file twice (check, then insert): spool stdin to disk.
                with tempfile.NamedTemporaryFile("wb", delete=False, suffix=".ndjson") as spool:
                    shutil.copyfileobj(sys.stdin.buffer, spool)
                spooled = path = spool.name
            total = ndjson.check(path)
            with progress_bar(
                self.stderr, total=total, desc="loading", enabled=options["progress"]
            ) as tick:
                rows, inserted = ndjson.load(path, on_row=tick, checked=total)
        except ndjson.LoadError as exc:
            raise CommandError(f"{options['file']}: {exc}; nothing was loaded") from None
        except OSError as exc:
            raise CommandError(f"could not read {options['file']}: {exc}") from exc
        except DatabaseError as exc:
            raise CommandError(
                f"could not write the queue: {exc}; the batches committed before stay, "
                "and loading the file again adds only the rest"
            ) from exc
        finally:
            if spooled is not None:
                os.unlink(spooled)
        self.stdout.write(
            f"Loaded {inserted} new row(s) of {rows} in {options['file']} "
            f"({rows - inserted} already queued)."
        )
