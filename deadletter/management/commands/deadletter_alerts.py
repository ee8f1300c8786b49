"""`manage.py deadletter_alerts [--dry-run]`: evaluate the alert rules once
(`reports.alerts.evaluate`), as the drain service does after each pass, and say
what went out, and what waits for the next digest and until when; for cron where
no service runs. `--dry-run` says what would fire and clear, and sends and writes
nothing. A database error is one line and exit
status 1 (`DatabaseCommand`)."""

from __future__ import annotations

from datetime import UTC
from typing import Any

from django.core.management.base import CommandParser

from deadletter.conf import conf
from deadletter.management.database import DatabaseCommand
from deadletter.reports.alerts.evaluate import evaluate


class Command(DatabaseCommand):
    help = "Evaluate the alert rules of DEADLETTER_ALERTS once and send what fires."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Say what would fire or clear; send nothing, write nothing.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        dry_run = options["dry_run"]
        done = evaluate(dry_run=dry_run)
        verb = "Would send" if dry_run else "Sent"
        for alert in done.alerts:
            self.stdout.write(f"{verb} ({alert.kind}): {alert.title}")
            self.stdout.write(f"  {alert.link}")
        for note in done.notes:
            self.stdout.write(f"Note: {note}")
        for channel in done.failed:
            self.stderr.write(f"Channel failed (parked in deadletter.alerts): {channel}")
        if dry_run:
            self.stdout.write(f"Would fire {done.fired}, clear {done.cleared}.")
        else:
            self.stdout.write(
                f"Fired {done.fired}, sent {done.sent}, cleared {done.cleared}, "
                f"digested {done.digested}."
            )
        for alert in done.waiting:
            self.stdout.write(f"Waiting for the next digest ({alert.kind}): {alert.title}")
        if done.waiting and done.waiting_until is not None:
            until = done.waiting_until.astimezone(UTC).isoformat(timespec="seconds")
            self.stdout.write(
                f"{len(done.waiting)} alert(s) wait: a digest went out less than "
                f"DEADLETTER_ALERT_DIGEST ({conf.ALERT_DIGEST}) ago; they go out as one digest "
                f"at the first evaluation from {until}."
            )
