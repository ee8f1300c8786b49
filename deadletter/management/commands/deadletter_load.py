"""`manage.py deadletter_load FILE`: put the rows of an NDJSON dump back, keys kept.

Every line is checked before anything is written: a malformed line (or one
nested too deeply, over `DEADLETTER_MAX_ROW_BYTES`, or with a first failure
in the future) is named with its number and nothing of the file is loaded.
A row whose key is already queued is left alone, so loading the same file
twice adds nothing; one whose key is queued with other content (a conflict:
the queued row was retried, or the dump is of another database) is not
written either, and the command says so and exits with status 1 once the
rest is loaded.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import IO, Any

from django.core.management.base import CommandError, CommandParser

from deadletter.management.database import DatabaseCommand, database_errors
from deadletter.management.progress import add_progress_argument, progress_bar
from deadletter.transfer import ndjson
from deadletter.wire import keys


class Command(DatabaseCommand):
    help = "Load an NDJSON dump (deadletter_dump) into the queue, keeping each row's key."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", metavar="FILE", help="The dump to load; - reads stdin.")
        add_progress_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        name, enabled = options["file"], options["progress"]
        source: str | IO[str] = sys.stdin if name == "-" else name
        size = None if name == "-" else _size(name)
        then = "; the batches committed before stay, and loading the file again adds only the rest"
        try:
            with (
                database_errors(then=then),
                tempfile.TemporaryFile(prefix="deadletter-load-") as spool,
            ):
                with progress_bar(
                    self.stderr, total=size, desc="checking", unit="B", enabled=enabled
                ) as tick:
                    rows = ndjson.check(source, spool, on_bytes=tick)
                with progress_bar(self.stderr, total=rows, desc="loading", enabled=enabled) as tick:
                    loaded = ndjson.insert(spool, on_row=tick)
        except ndjson.LoadError as exc:
            raise CommandError(f"{name}: {exc}; nothing was loaded") from None
        except OSError as exc:
            raise CommandError(f"could not read {name}: {exc}") from exc
        summary = (
            f"Loaded {loaded.inserted} new row(s) of {loaded.rows} in {name} "
            f"({loaded.identical} already queued"
        )
        if loaded.conflicting:
            summary += f", {loaded.conflicting} conflicting"
        self.stdout.write(summary + ").")
        if loaded.conflicting:
            raise CommandError(_conflicts(name, loaded))


def _conflicts(name: str, loaded: ndjson.Loaded) -> str:
    shown = ", ".join(f"line {n} key {keys.to_text(key)}" for n, key in loaded.conflicts)
    more = loaded.conflicting - len(loaded.conflicts)
    if more:
        shown += f" and {more} more"
    return (
        f"{name}: {loaded.conflicting} row(s) not loaded: their key is queued with other "
        f"content, left as queued ({shown})"
    )


def _size(path: str) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None
