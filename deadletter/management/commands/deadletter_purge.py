"""`manage.py deadletter_purge [--queue NAME ...] [--dry-run] [--batch N]`: remove
the archive's entries older than their queue's `archive_for`
(`archive_retention.purge`, in batches), as the drain service does between passes;
`--dry-run` says what it would remove. A `--queue` that names no queue and has
no archive entry is a `CommandError` naming it (exit 2)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import CommandParser

from deadletter.management.arguments import add_queue_argument
from deadletter.management.commands.deadletter_drain import positive_int
from deadletter.management.database import DatabaseCommand
from deadletter.management.queues import require_known_queues
from deadletter.queue import limits
from deadletter.queue.archive_retention import archived_counts, due_for_purge, purge

DEFAULT_BATCH = 500


def retention(delta: timedelta) -> str:
    """`30 days`, `1 day`, `12:00:00`: how long a queue's archive keeps an entry."""
    if delta == timedelta(days=delta.days):
        return f"{delta.days} day{'' if delta.days == 1 else 's'}"
    return str(delta)


class Command(DatabaseCommand):
    help = (
        "Remove the archived messages older than their queue's archive_for "
        "(DEADLETTER_ARCHIVE_FOR unless its policy says otherwise)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_queue_argument(parser, "Only this queue's archive (repeatable); default: every queue.")
        parser.add_argument(
            "--dry-run", action="store_true", help="Say what would be purged; remove nothing."
        )
        parser.add_argument(
            "--batch",
            type=positive_int,
            default=DEFAULT_BATCH,
            metavar="N",
            help=f"Entries removed per transaction (default {DEFAULT_BATCH}).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        names: list[str] | None = options["queues"]
        if names is not None:
            names = list(dict.fromkeys(names))
            held = archived_counts(names)
            require_known_queues(n for n in names if not held[n])
        plan: dict[str, int] = {}
        for name in names if names is not None else [None]:
            plan.update(due_for_purge(name))
        if not plan:
            self.stdout.write("Nothing to purge: no archived message is past its retention.")
            return
        verb = "Would purge" if options["dry_run"] else "Purged"
        total = 0
        for name, due in plan.items():
            kept = limits.archive_for(name)
            n = due if options["dry_run"] else purge(queue=name, batch=options["batch"])
            total += n
            after = "" if kept is None else f" (kept for {retention(kept)})"
            self.stdout.write(f"{verb} {n} archived message(s) of queue {name}{after}.")
        if len(plan) > 1:
            self.stdout.write(f"{verb} {total} archived message(s) in all.")
