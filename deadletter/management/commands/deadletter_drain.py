"""`manage.py deadletter_drain`: hand parked messages back to their handlers.

Only parses arguments and shows progress; the drain itself is
`deadletter.drain.Drainer` (one pass) or `deadletter.drain.serve` (`--forever`).
Exit status: 0 when nothing stayed failed, 1 when some message did, a breaker
paused a queue, a parked queue has no handler, or a worker or the database
failed (unreachable, or not migrated: said in one line before any pass), 2 for
usage and configuration errors (nothing touched; no handler at all for parked
queues included), 128 + signal number when a second SIGINT/SIGTERM stopped it
at once, or the first one's `--grace` ran out. With `--forever`, a
SIGINT/SIGTERM that stops it after the message in hand exits 0. Threads a
handler left running get what is left of the grace at exit, then are named and
left behind.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import re
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import DatabaseError

from deadletter.drain import (
    DEFAULT_GRACE,
    DEFAULT_INTERVAL,
    DrainAborted,
    DrainConfigError,
    Drainer,
    DrainLocked,
    DrainOptions,
    DrainReport,
    Outcome,
    SignalGuard,
    serve,
)
from deadletter.management.arguments import add_queue_argument
from deadletter.management.database import DatabaseCommand, require_migrated
from deadletter.management.leaks import StopClock, exit_past_leaked_threads
from deadletter.management.progress import add_progress_argument
from deadletter.management.queues import Unhandled, unhandled_queues
from deadletter.wire import keys

logger = logging.getLogger("deadletter")

_RATE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(?:/\s*(s|sec|m|min|h|hour))?\s*$")
_PER = {None: 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "hour": 3600.0}


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def seconds(text: str) -> float:
    """A number of seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, got {text!r}")
    return value


MIN_INTERVAL = 1.0
"""The shortest `--interval`: a service with none would spin on the database."""


def interval(text: str) -> float:
    """argparse `type=`: `--interval` seconds, at least `MIN_INTERVAL`."""
    value = seconds(text)
    if value < MIN_INTERVAL:
        raise argparse.ArgumentTypeError(
            f"must be at least {MIN_INTERVAL:g} second between passes, got {text!r}"
        )
    return value


def rate(text: str) -> float:
    """`N/s` (also `N`, `N/m`, `N/h`) as deliveries per second."""
    match = _RATE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a rate like 10/s: {text!r}")
    per_second = float(match.group(1)) / _PER[match.group(2)]
    if per_second <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text!r}")
    return per_second


class Command(DatabaseCommand):
    help = (
        "Hand parked messages back to their handlers (DEADLETTER_HANDLERS), oldest first; "
        "a row is removed only once its handler succeeded."
    )
    # Handler problems are reported by the drain itself with exit status 2,
    # before any row is touched; the full system check would exit 1.
    requires_system_checks: list[str] = []
    grace = DEFAULT_GRACE
    concurrency = 1
    clock: StopClock | None = None

    def run_from_argv(self, argv: list[str]) -> None:
        """As Django's, then an exit that threads a handler leaked cannot hold past
        the grace (`leaks`)."""
        code = 0
        try:
            super().run_from_argv(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        since = self.clock.asked_at if self.clock is not None else None
        exit_past_leaked_threads(code, grace=self.grace, since=since)
        sys.exit(code)

    def add_arguments(self, parser: CommandParser) -> None:
        add_queue_argument(
            parser, "Drain only this queue (repeatable); default: every configured queue."
        )
        parser.add_argument(
            "--limit", type=positive_int, metavar="N", help="Hand over at most N messages."
        )
        parser.add_argument(
            "--rate",
            type=rate,
            metavar="N/s",
            help="At most N deliveries per second (also N/m, N/h), across all workers.",
        )
        parser.add_argument(
            "--workers",
            type=positive_int,
            default=1,
            metavar="N",
            help="Worker processes (PostgreSQL, MySQL/MariaDB; SQLite runs one).",
        )
        parser.add_argument(
            "--concurrency",
            type=positive_int,
            default=1,
            metavar="N",
            help="Messages in hand at once in each process, each handler in a thread "
            "(for slow handlers; every database, with --workers too).",
        )
        parser.add_argument(
            "--wait",
            action="store_true",
            help="SQLite: wait for another drain of the same queue to end instead of refusing.",
        )
        parser.add_argument(
            "--grace",
            type=seconds,
            default=DEFAULT_GRACE,
            metavar="SECONDS",
            help="After the first SIGINT/SIGTERM, wait this long for the message in hand, "
            "then stop as a second signal would, leaving it queued "
            f"(default {DEFAULT_GRACE:g}).",
        )
        parser.add_argument(
            "--forever",
            action="store_true",
            help="Run pass after pass (a service: systemd, a container) until SIGTERM/SIGINT, "
            "which ends it after the message in hand with exit status 0.",
        )
        parser.add_argument(
            "--interval",
            type=interval,
            default=None,
            metavar="SECONDS",
            help=f"With --forever, the pause between passes (default {DEFAULT_INTERVAL:g}).",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Say what would be done; change nothing."
        )
        parser.add_argument(
            "--format",
            choices=["text", "json"],
            default="text",
            help="The summary as text (default) or as one JSON object.",
        )
        add_progress_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        fmt = options["format"]
        forever = options["forever"]
        self.grace = options["grace"]
        self.concurrency = options["concurrency"]
        if options["interval"] is not None and not forever:
            raise CommandError("--interval needs --forever", returncode=2)
        if forever and options["dry_run"]:
            raise CommandError("--dry-run makes one pass; leave out --forever", returncode=2)
        bar = self._want_bar(fmt) and not options["dry_run"] and options["progress"] and not forever
        try:
            drainer = Drainer(
                options["queues"],
                DrainOptions(
                    limit=options["limit"],
                    rate=options["rate"],
                    workers=options["workers"],
                    concurrency=options["concurrency"],
                    wait=options["wait"],
                    grace=options["grace"],
                    actor="service" if forever else "drain",
                ),
                log_progress=not bar,
            )
        except DrainConfigError as exc:
            raise CommandError(str(exc), returncode=2) from exc
        require_migrated()
        unhandled = self._unhandled(drainer, options)
        if not drainer.queues:
            self._nothing_to_drain(unhandled, forever)
            return
        if options["dry_run"]:
            self._dry_run(drainer, fmt, unhandled)
            return
        clock = self.clock = StopClock(drainer)
        if forever:
            self._serve(drainer, clock, options)
            return
        self._once(drainer, clock, options, bar, unhandled)

    def _once(
        self,
        drainer: Drainer,
        clock: StopClock,
        options: dict[str, Any],
        bar: bool,
        unhandled: Unhandled,
    ) -> None:
        """One pass, its summary, and the exit status it earned."""
        fmt = options["format"]
        try:
            with self._progress(drainer, bar), SignalGuard(clock.stop, grace=options["grace"]):
                report = drainer.run()
        except (DrainLocked, DrainConfigError) as exc:
            raise CommandError(str(exc), returncode=2) from exc
        except DrainAborted as exc:
            if exc.report is not None:
                self._summary(exc.report, fmt, grace=exc.grace)
            why = (
                f"a second {exc.signame}"
                if exc.grace is None
                else f"{exc.signame} after its {exc.grace:g} s grace ran out"
            )
            raise CommandError(
                f"aborted by {why}; the message in hand stays queued",
                returncode=128 + exc.signum,
            ) from None
        self._summary(report, fmt, unhandled=unhandled)
        problems = []
        if report.exit_code:
            problems.append(
                f"{report.failed} message(s) stayed failed, {report.held} kept for an "
                f"operator, {report.errors} error(s)"
            )
        if unhandled:
            problems.append(unhandled.line())
        if problems:
            raise CommandError("; ".join(problems), returncode=report.exit_code or 1)

    def _unhandled(self, drainer: Drainer, options: dict[str, Any]) -> Unhandled:
        """Parked queues no handler takes; none when the operator chose the queues."""
        if options["queues"] is not None:
            return Unhandled([], False)
        return unhandled_queues(drainer.queues)

    def _nothing_to_drain(self, unhandled: Unhandled, forever: bool) -> None:
        """No handler at all: refuse when something is parked or a service would idle
        for ever; otherwise say there was nothing to do."""
        if unhandled:
            raise CommandError(f"nothing to drain: {unhandled.line()}", returncode=2)
        if forever:
            raise CommandError(
                "nothing to drain: DEADLETTER_HANDLERS names no queue, so --forever would "
                "never hand anything over",
                returncode=2,
            )
        self.stdout.write("Nothing to drain: DEADLETTER_HANDLERS names no queue, none is parked.")

    def _serve(self, drainer: Drainer, clock: StopClock, options: dict[str, Any]) -> None:
        """`--forever`: one line a pass on stdout (a JSON object with `--format json`),
        seen with or without `LOGGING`, and a warning a pass while parked queues have
        no handler; a stop signal ends it after the message in hand, exit status 0."""
        interval = DEFAULT_INTERVAL if options["interval"] is None else options["interval"]
        passes = 0

        def each(report: DrainReport) -> None:
            nonlocal passes
            passes += 1
            if options["format"] == "json":
                self.stdout.write(json.dumps(report.as_dict()))
            elif options["verbosity"] >= 1:
                self.stdout.write(self._heartbeat(passes, report))
            self.stdout.flush()
            if options["queues"] is None:
                self._warn_unhandled(drainer)

        try:
            with SignalGuard(clock.stop, grace=options["grace"]):
                done = serve(drainer, interval=interval, on_pass=each)
        except (DrainLocked, DrainConfigError) as exc:
            raise CommandError(str(exc), returncode=2) from exc
        except DrainAborted as exc:
            raise CommandError(
                f"aborted by a second {exc.signame}; the message in hand stays queued",
                returncode=128 + exc.signum,
            ) from None
        if options["format"] == "text":
            self.stdout.write(
                f"Stopped by {done.stopped_by} after {done.passes} pass(es): "
                f"{done.delivered} delivered, {done.failed} failed attempt(s)."
            )
        if done.stopped_by not in ("SIGINT", "SIGTERM"):
            why = done.failure or f"the service stopped: {done.stopped_by}"
            raise CommandError(why, returncode=1)

    @staticmethod
    def _heartbeat(passes: int, report: DrainReport) -> str:
        line = (
            f"{datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ} pass {passes}: {report.delivered} "
            f"delivered, {report.failed} failed, {report.waiting} waiting"
        )
        if report.held:
            line += f", {report.held} kept for an operator"
        if report.paused:
            line += f", paused {','.join(report.paused)}"
        if report.errors:
            line += f", {report.errors} error(s) (see the log)"
        return line + f" in {report.elapsed:.2f}s"

    @staticmethod
    def _warn_unhandled(drainer: Drainer) -> None:
        try:
            unhandled = unhandled_queues(drainer.queues)
        except DatabaseError:
            return  # the pass has logged what the database said
        if unhandled:
            logger.warning("drain leaves parked queues with no handler queues=%s", unhandled)

    def _want_bar(self, fmt: str) -> bool:
        if fmt != "text" or not self.stderr.isatty():
            return False
        try:
            import tqdm  # noqa: F401
        except ImportError:
            return False
        return True

    @contextlib.contextmanager
    def _progress(self, drainer: Drainer, bar: bool) -> Iterator[None]:
        """A tqdm bar on a terminal (log lines go above it); plain log lines otherwise."""
        if not bar:
            yield
            return
        from tqdm import tqdm
        from tqdm.contrib.logging import logging_redirect_tqdm

        tqdm.monitor_interval = 0  # no monitor thread: --workers forks this process

        with (
            tqdm(total=drainer.pending(), unit="msg", desc="draining", dynamic_ncols=True) as pbar,
            logging_redirect_tqdm(loggers=[logger]),
        ):

            def tick(outcome: Outcome) -> None:
                pbar.update(1)

            drainer.on_outcome = tick
            yield

    def _dry_run(self, drainer: Drainer, fmt: str, unhandled: Unhandled) -> None:
        counts = {"deliver": 0, "expired": 0, "corrupt": 0, "waiting": 0}
        lines: list[dict[str, Any]] = []
        for name, path, item in drainer.preview():
            counts[item.verdict] += 1
            subject = item.msg.subject if item.msg is not None else None
            due = item.due_at.isoformat() if item.due_at is not None else None
            if fmt == "json":
                lines.append(
                    {
                        "queue": name,
                        "key": keys.to_text(item.key),
                        "subject": subject,
                        "action": item.verdict,
                        "handler": path,
                        "due_at": due,
                    }
                )
            elif item.verdict == "waiting":
                self.stdout.write(
                    f"Would leave {keys.to_text(item.key)} ({subject!r}) of {name} waiting: "
                    f"due {due}"
                )
            elif item.verdict == "deliver":
                self.stdout.write(
                    f"Would hand {keys.to_text(item.key)} ({subject!r}) of {name} to {path}"
                )
            else:
                self.stdout.write(
                    f"Would drop {item.verdict} row {keys.to_text(item.key)} of {name}"
                )
        if fmt == "json":
            summary = {"dry_run": True, "would": counts, "messages": lines}
            self.stdout.write(json.dumps({**summary, "no_handler": dict(unhandled.counts)}))
            return
        if unhandled:
            self.stdout.write(f"Would leave {unhandled} untouched: no handler for them")
        self.stdout.write(
            f"Would deliver {counts['deliver']} message(s), leave {counts['waiting']} waiting, "
            f"and drop {counts['expired']} expired and {counts['corrupt']} corrupt; "
            "nothing was changed (dry run)."
        )

    def _summary(
        self,
        report: DrainReport,
        fmt: str,
        grace: float | None = None,
        unhandled: Unhandled | None = None,
    ) -> None:
        if fmt == "json":
            no_handler = dict(unhandled.counts) if unhandled else {}
            self.stdout.write(json.dumps({**report.as_dict(), "no_handler": no_handler}))
            return
        d = report.dropped
        rate_text = f", {report.handled / report.elapsed:.1f} msg/s" if report.elapsed > 0 else ""
        # Only a pass that met no error drained its queues; one that did says so.
        verb = "Drained" if not report.errors else "Tried to drain"
        lines = [
            f"{verb} {', '.join(report.queues)} "
            f"in {report.elapsed:.2f}s{rate_text}"
            + (f" with {report.workers} workers" if report.workers > 1 else "")
            + (f", {self.concurrency} at once" if self.concurrency > 1 else ""),
            f"  delivered:    {report.delivered}",
            f"  requeued:     {report.requeued} (partly delivered, rest parked again)",
            f"  dropped:      {sum(d.values())} (expired {d['expired']}, corrupt {d['corrupt']}, "
            f"permanent {d['permanent']}, max attempts {d['max_attempts']})",
            f"  still failed: {report.failed}",
        ]
        if report.held:
            lines.append(
                f"  kept for an operator: {report.held} (NeedsOperator, never dropped; "
                "see LastError)"
            )
        if report.waiting:
            due = report.next_due.isoformat(timespec="seconds") if report.next_due else "-"
            lines.append(f"  waiting:      {report.waiting} (backoff; the next is due {due})")
        if report.paused:
            lines.append(
                f"  paused:       {', '.join(report.paused)} (breaker: too many failures in a row)"
            )
        if report.errors:
            lines.append(f"  errors:       {report.errors} (see the log)")
        if report.aborted_by and grace is not None:
            lines.append(f"  aborted by {report.aborted_by} after its {grace:g} s grace ran out")
        elif report.aborted_by:
            lines.append(f"  aborted by a second {report.aborted_by}")
        elif report.stopped_by:
            lines.append(f"  stopped early by {report.stopped_by}")
        self.stdout.write("\n".join(lines))
