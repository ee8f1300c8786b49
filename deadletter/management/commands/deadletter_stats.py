"""`manage.py deadletter_stats [--queue NAME ...] [--format text|json|prometheus] [--limit N]`:
the figures of `deadletter.reports.stats.collect`, the same the metrics endpoint serves;
an unknown `--queue` is a `CommandError` naming it.
With `DEADLETTER_EXPIRY_WARNING` set it also warns, once per message, about
messages close to the age limit (`deadletter.reports.expiry`), so a cron job suffices."""

from __future__ import annotations

import argparse
import json
import re
from datetime import timedelta
from typing import Any

from django.core.management.base import CommandError, CommandParser

from deadletter.management.arguments import add_queue_argument
from deadletter.management.database import DatabaseCommand
from deadletter.management.queues import require_known_queues
from deadletter.queue import search
from deadletter.reports import expiry, stats
from deadletter.store.counters import DROP_REASONS

DEFAULT_LIMIT = 1000
OTHERS = "(other queues)"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


def duration(text: str) -> timedelta:
    """argparse `type=`: `90s`, `15m`, `12h`, `3d`."""
    match = _DURATION.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a duration like 3d, 12h, 15m or 90s: {text!r}")
    return timedelta(seconds=float(match.group(1)) * _UNIT[match.group(2)])


def sample(text: str) -> int | None:
    """argparse `type=`: a row count, or `all`."""
    if text == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number or 'all': {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def age(seconds: float | None) -> str:
    """`3d 04h`, `5h 12m`, `4m 10s`, `42s`; `-` when there is no message."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    days, rest = divmod(s, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


class Command(DatabaseCommand):
    help = (
        "Each queue's depth, oldest message age (parked and first failed), messages "
        "expiring within a horizon, attempts histogram and drops, with totals."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_queue_argument(parser, "Only this queue (repeatable); default: every queue.")
        parser.add_argument(
            "--format", choices=["text", "json", "prometheus"], default="text", help="Output."
        )
        parser.add_argument(
            "--horizon",
            type=duration,
            metavar="DURATION",
            help="Count messages expiring within this (3d, 12h); default "
            "DEADLETTER_EXPIRY_WARNING, else 1d.",
        )
        parser.add_argument(
            "--attempts-sample",
            type=sample,
            default=stats.ATTEMPTS_SAMPLE,
            metavar="N",
            help=f"Rows read from each queue's head for the attempts histogram "
            f"(default {stats.ATTEMPTS_SAMPLE}; 'all' reads every row).",
        )
        parser.add_argument(
            "--limit",
            type=sample,
            default=DEFAULT_LIMIT,
            metavar="N",
            help=f"List the queues of DEADLETTER_HANDLERS and the first N others by name; "
            f"the rest are summed in one row (default {DEFAULT_LIMIT}; 'all' lists every queue).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        queues = options["queues"]
        require_known_queues(queues)
        warned = expiry.warn_expiring(queues)
        figures = stats.collect(
            queues,
            horizon=options["horizon"],
            attempts_sample=options["attempts_sample"],
            limit=options["limit"],
        )
        fmt = options["format"]
        waiting = search.pending_count()
        if fmt == "json":
            self.stdout.write(
                json.dumps({**figures.as_dict(), "warned": warned, "search_pending": waiting})
            )
        elif fmt == "prometheus":
            try:
                from deadletter.reports.metrics import render

                self.stdout.write(render(figures).decode("utf-8"), ending="")
            except ImportError:
                raise CommandError(
                    "--format prometheus needs prometheus_client: "
                    "pip install 'django-deadletter[prometheus]'"
                ) from None
        else:
            self.stdout.write(self._table(figures))
            if waiting:
                self.stdout.write(
                    f"{waiting} row(s) wait for the search index (a search or the drain "
                    "service indexes them)."
                )
            if warned:
                self.stdout.write(f"Warned about {warned} message(s) close to the age limit.")

    def _table(self, figures: stats.Stats) -> str:
        horizon = age(figures.horizon.total_seconds())
        head = ["queue", "depth", "oldest parked", "oldest failed", f"expiring <{horizon}"]
        head += ["waiting", "paused", "archived"]
        head += [r.replace("_", " ") for r in DROP_REASONS]
        rows = [self._row(q) for q in figures.queues]
        if figures.others is not None:
            rows.append([OTHERS, *self._row(figures.others)[1:]])
        rows.append(["TOTAL", *self._row(figures.totals)[1:]])
        table = self._align([head, *rows])
        labels = stats.bucket_labels()
        attempts = [["attempts", *labels, "rows read"]]
        for q in [*figures.queues, figures.totals]:
            name = q.name or "TOTAL"
            attempts.append([name, *(str(q.attempts[b]) for b in labels), str(q.attempts_rows)])
        note = ""
        if figures.others is not None:
            note = (
                f"\n\n{OTHERS}: the queues past --limit, summed (depth, waiting, archived "
                "and drops; their ages, expiring and attempts are not read). --limit all lists "
                "every queue."
            )
        return table + "\n\n" + self._align(attempts) + note

    def _row(self, q: stats.QueueStats) -> list[str]:
        expiring = f"{q.expiring}" + ("" if q.expiring_complete else "+")
        return [
            q.name,
            str(q.depth),
            age(q.oldest_enqueued_age),
            age(q.oldest_failure_age),
            expiring,
            str(q.waiting),
            "yes" if q.paused else "no",
            str(q.archived),
            *(str(q.dropped.get(r, 0)) for r in DROP_REASONS),
        ]

    @staticmethod
    def _align(rows: list[list[str]]) -> str:
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = []
        for row in rows:
            cells = [row[0].ljust(widths[0])]
            cells += [cell.rjust(w) for cell, w in zip(row[1:], widths[1:], strict=True)]
            lines.append("  ".join(cells).rstrip())
        return "\n".join(lines)
