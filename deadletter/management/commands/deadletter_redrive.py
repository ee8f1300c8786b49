"""`manage.py deadletter_redrive`: plan a redrive of the messages of one queue a
filter matches, and run it here in the foreground; or run, resume, cancel and
list stored ones.

Only parses arguments, checks who may, writes the audit entry and shows progress;
the redrive itself is `deadletter.drain.redrives`, `redrive_run` and
`redrive_turns`.

Who may: without `--user` the command runs as the shell's operator, who already
holds every power it checks: the redrive records the operating system's user.
`--user USERNAME` (where `django.contrib.auth` is installed) names the Django user
who starts or cancels it instead, as the API would: they need the
`deadletter.redrive_queuedmessage` permission and queue access granting `redrive`
on the queue (and the destination), their redaction applies to the search (in
`--dry-run` too), and the `LogEntry` in the redrive's History names them (where
`django.contrib.admin` is installed).

Exit status: 0 when the redrive finished with nothing failed again, 1 when some
message failed again or it stopped (stop-after, a signal, a cancel), 2 for usage
errors (nothing stored), 128 + signal number when a second SIGINT/SIGTERM
stopped it at once. The first SIGINT/SIGTERM stops it after the message in hand
as stopped; `--resume ID` carries on from its cursor.
"""

from __future__ import annotations

import argparse
import getpass
import json
from datetime import UTC, date, datetime, time
from typing import Any

from django.apps import apps
from django.contrib.auth import get_user_model
from django.core.management.base import CommandError, CommandParser

from deadletter.conf import conf
from deadletter.drain import DrainAborted, SignalGuard, redrives
from deadletter.drain.delivery import Stop
from deadletter.drain.redrive_run import run_redrive
from deadletter.drain.redrive_turns import resume_redrives
from deadletter.management.commands.deadletter_drain import positive_int, rate
from deadletter.management.database import DatabaseCommand, require_migrated
from deadletter.management.progress import add_progress_argument, progress_bar
from deadletter.models import Redrive
from deadletter.queue import access
from deadletter.queue.redaction import reveals
from deadletter.queue.search import qualifiers

LISTED = 20
ALL = 0
"""`--resume` with no id: every unfinished redrive."""


def moment(text: str) -> datetime:
    """argparse `type=`: an ISO date (midnight UTC) or date-time (UTC unless it says)."""
    try:
        if len(text.strip()) == 10:
            return datetime.combine(date.fromisoformat(text.strip()), time(), tzinfo=UTC)
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an ISO date or date-time like 2026-12-01 or 2026-12-01T08:30: {text!r}"
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def ramp(text: str) -> list[int]:
    """argparse `type=`: step sizes such as `1,5,20` (`plan_redrive` judges them)."""
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not step sizes like 1,5,20: {text!r}") from None


def percent(text: str) -> float:
    """argparse `type=`: a percentage such as `5` or `5%` (`plan_redrive` judges it)."""
    try:
        return float(text.rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a percentage: {text!r}") from None


class Command(DatabaseCommand):
    help = (
        "Redrive the messages of a queue a search matches: counted first (the plan), then "
        "handed to the queue's handler at a rate, step by step, or moved to another queue "
        "(--to). Also runs, resumes, cancels and lists stored redrives."
    )
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--queue", metavar="NAME", help="The queue.")
        parser.add_argument("--search", default="", metavar="QUERY", help=qualifiers.help_text())
        parser.add_argument(
            "--after", type=moment, metavar="WHEN", help="First failed at or after (ISO)."
        )
        parser.add_argument("--before", type=moment, metavar="WHEN", help="First failed before.")
        parser.add_argument(
            "--to",
            metavar="QUEUE",
            dest="destination",
            help="Move the messages into this queue (no handler call), keeping their order.",
        )
        parser.add_argument(
            "--rate", type=rate, metavar="N/s", help="At most N messages a second (N/m, N/h)."
        )
        parser.add_argument(
            "--ramp",
            type=ramp,
            default=[],
            metavar="1,5,20",
            help="Steps of these sizes, each judged by --stop-after before the next, then "
            "steps of the last size to the end.",
        )
        parser.add_argument(
            "--stop-after",
            type=percent,
            metavar="PCT",
            help="Stop when more than PCT %% of a step's messages fail again.",
        )
        parser.add_argument(
            "--ignore-backoff",
            action="store_true",
            help="Hand over messages a backoff holds too (by default they are left waiting).",
        )
        parser.add_argument(
            "--concurrency", type=int, default=1, metavar="N", help="Messages in hand."
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Show the plan; store and change nothing."
        )
        parser.add_argument("--run", type=positive_int, metavar="ID", help="Run a planned one.")
        parser.add_argument(
            "--resume",
            type=positive_int,
            nargs="?",
            const=ALL,
            metavar="ID",
            help="Carry on a stopped, failed or abandoned one (every unfinished one without ID).",
        )
        parser.add_argument("--cancel", type=positive_int, metavar="ID", help="Cancel one.")
        parser.add_argument("--list", action="store_true", help="List the latest redrives.")
        parser.add_argument(
            "--user",
            metavar="USERNAME",
            help="The Django user who starts or cancels it, as the API would (needs the "
            f"{redrives.PERMISSION} permission and queue access granting redrive; their redaction "
            "applies; named in the audit entry). Without it: the shell's operator.",
        )
        parser.add_argument(
            "--format",
            choices=["text", "json"],
            default="text",
            help="Output as text (default) or as JSON objects, one a line.",
        )
        add_progress_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        actions = [name for name in ("run", "resume", "cancel") if options[name] is not None] + (
            ["list"] if options["list"] else []
        )
        if len(actions) > 1 or (actions and options["queue"]):
            raise CommandError(
                "give one of --queue, --run, --resume, --cancel, --list", returncode=2
            )
        require_migrated()
        if options["list"]:
            self._list(options)
        elif options["cancel"] is not None:
            self._cancel(options)
        elif options["run"] is not None or options["resume"] is not None:
            self._carry_on(options)
        elif options["queue"]:
            self._plan_and_run(options)
        else:
            raise CommandError("name the queue to redrive: --queue NAME", returncode=2)

    # -- who may

    def _who(self, options: dict[str, Any], *queues: str) -> Any:
        """The Django user of `--user`, checked: the permission, and queue access
        granting `redrive` on each of `queues`; None without `--user` (the shell's
        operator)."""
        name = options["user"]
        if not name:
            return None
        if not apps.is_installed("django.contrib.auth"):
            raise CommandError(
                "--user names a Django user, and django.contrib.auth is not installed; "
                "without --user the redrive records the operating system's user",
                returncode=2,
            )
        user_model: Any = get_user_model()
        try:
            user = user_model.objects.get_by_natural_key(name)
        except user_model.DoesNotExist:
            user = None
        if user is None or not user.is_active:
            raise CommandError(f"no active user {name!r}", returncode=2)
        if not user.has_perm(redrives.PERMISSION):
            raise CommandError(
                f"{name!r} may not redrive: no {redrives.PERMISSION} permission", returncode=2
            )
        granted = access.scope_of(user)
        for queue in queues:
            if not granted.allows(queue, redrives.ACTION):
                raise CommandError(
                    f"{name!r} may not redrive {queue!r}: their queue access does not grant it",
                    returncode=2,
                )
        return user

    @staticmethod
    def _name_of(user: Any) -> str:
        return user.get_username() if user is not None else getpass.getuser()

    # -- the actions

    def _plan_and_run(self, options: dict[str, Any]) -> None:
        dry = options["dry_run"]
        user = self._who(options, *(name for _, name in redrives.guarded(options)))
        try:
            redrive = redrives.plan_redrive(
                **redrives.inputs(options),
                started_by="" if dry else self._name_of(user),
                save=not dry,
                # A named user who may not see what DEADLETTER_REDACT masks plans a
                # search that never matches it (a dry run too); the shell's operator
                # sees everything.
                reveal=user is None or reveals(user),
                by=user,
                note="Started by deadletter_redrive",
            )
        except redrives.RedriveError as exc:
            raise _refused(exc) from exc
        if dry:
            self._say(
                options,
                redrive,
                f"Would redrive: {self._plan_line(redrive)}; nothing was stored (dry run).",
                dry_run=True,
            )
            return
        self._say(options, redrive, f"Planned redrive {redrive.pk}: {self._plan_line(redrive)}")
        self._run(options, redrive.pk, resume=False)

    def _carry_on(self, options: dict[str, Any]) -> None:
        if options["run"] is not None:
            self._run(options, options["run"], resume=False)
            return
        if options["resume"] != ALL:
            self._run(options, options["resume"], resume=True)
            return
        stop = Stop()
        with SignalGuard(stop):
            done = resume_redrives(stop=stop)
        for redrive in done:
            self._say(options, redrive, self._result_line(redrive))
        if not done:
            self._say_text(options, "No unfinished redrive to carry on.")
        if any(self._exit_code(r) for r in done):
            raise CommandError("a redrive did not finish cleanly (see above)", returncode=1)

    def _run(self, options: dict[str, Any], redrive_id: int, *, resume: bool) -> None:
        stop = Stop()
        rows = Redrive.objects.using(conf.DATABASE)
        planned = rows.filter(pk=redrive_id).first()
        total = planned.matched if planned is not None else None
        shown = planned.matched - planned.remaining if planned is not None else 0
        enabled = options["progress"] and options["format"] == "text"
        try:
            with (
                progress_bar(
                    self.stderr, total=total, desc=f"redrive {redrive_id}", enabled=enabled
                ) as update,
                SignalGuard(stop),
            ):

                def progress(redrive: Redrive) -> None:
                    nonlocal shown
                    now = redrive.matched - redrive.remaining
                    if now > shown:
                        update(now - shown)
                        shown = now

                redrive = run_redrive(redrive_id, on_progress=progress, stop=stop, resume=resume)
        except redrives.RedriveError as exc:
            raise _refused(exc) from exc
        except DrainAborted as exc:
            raise CommandError(
                f"aborted by a second {exc.signame}; the message in hand stays queued; "
                f"--resume {redrive_id} carries on",
                returncode=128 + exc.signum,
            ) from None
        self._say(options, redrive, self._result_line(redrive))
        code = self._exit_code(redrive)
        if code:
            raise CommandError(
                f"redrive {redrive.pk} {redrive.status}: {redrive.reason or 'see above'}".rstrip(),
                returncode=code,
            )

    def _cancel(self, options: dict[str, Any]) -> None:
        planned = Redrive.objects.using(conf.DATABASE).filter(pk=options["cancel"]).first()
        user = self._who(options, *((planned.queue,) if planned is not None else ()))
        try:
            redrive = redrives.cancel_redrive(
                options["cancel"], by=user, note="Cancelled by deadletter_redrive"
            )
        except redrives.RedriveError as exc:
            raise _refused(exc) from exc
        self._say(
            options,
            redrive,
            f"Cancelled redrive {redrive.pk}; its runner stops after the message in hand.",
        )

    def _list(self, options: dict[str, Any]) -> None:
        rows = list(Redrive.objects.using(conf.DATABASE).order_by("-id")[:LISTED])
        if options["format"] == "json":
            for redrive in rows:
                self.stdout.write(json.dumps(_as_dict(redrive)))
            return
        if not rows:
            self.stdout.write("No redrive yet.")
            return
        for redrive in rows:
            target = f" -> {redrive.destination}" if redrive.destination else ""
            self.stdout.write(
                f"{redrive.pk:>6}  {redrive.status:<9}  {redrive.queue}{target}  "
                f"matched {redrive.matched}, delivered {redrive.delivered}, failed "
                f"{redrive.failed}, dropped {redrive.dropped}, moved {redrive.moved}, remaining "
                f"{redrive.remaining}  by {redrive.started_by or '-'}"
            )

    # -- output

    @staticmethod
    def _exit_code(redrive: Redrive) -> int:
        return 0 if redrive.status == Redrive.Status.FINISHED and not redrive.failed else 1

    @staticmethod
    def _plan_line(redrive: Redrive) -> str:
        parts = [f"{redrive.matched} message(s) of {redrive.queue}"]
        if redrive.search:
            parts.append(f"matching {redrive.search!r}")
        if redrive.after:
            parts.append(f"first failed from {redrive.after.isoformat()}")
        if redrive.before:
            parts.append(f"before {redrive.before.isoformat()}")
        parts.append(f"moved to {redrive.destination}" if redrive.destination else "to its handler")
        if redrive.rate:
            parts.append(f"at most {redrive.rate:g}/s")
        if redrive.ramp:
            parts.append(f"in steps of {','.join(map(str, redrive.ramp))}")
        if redrive.stop_after is not None:
            parts.append(f"stopping when more than {redrive.stop_after:g} % of a step fail again")
        if redrive.ignore_backoff:
            parts.append("waiting ones too")
        return ", ".join(parts)

    @staticmethod
    def _result_line(redrive: Redrive) -> str:
        line = (
            f"Redrive {redrive.pk} {redrive.status}: delivered {redrive.delivered}, failed "
            f"again {redrive.failed}, dropped {redrive.dropped}, moved {redrive.moved}, "
            f"remaining {redrive.remaining} of {redrive.matched}"
        )
        return f"{line} ({redrive.reason})" if redrive.reason else line

    def _say(self, options: dict[str, Any], redrive: Redrive, text: str, **extra: Any) -> None:
        if options["format"] == "json":
            self.stdout.write(json.dumps({**_as_dict(redrive), **extra}))
        else:
            self.stdout.write(text)
        self.stdout.flush()

    def _say_text(self, options: dict[str, Any], text: str) -> None:
        if options["format"] == "text":
            self.stdout.write(text)


def _as_dict(redrive: Redrive) -> dict[str, Any]:
    def when(value: datetime | None) -> str | None:
        return None if value is None else value.isoformat()

    return {
        "id": redrive.pk,
        "queue": redrive.queue,
        "search": redrive.search,
        "after": when(redrive.after),
        "before": when(redrive.before),
        "destination": redrive.destination,
        "rate": redrive.rate,
        "ramp": list(redrive.ramp),
        "stop_after": redrive.stop_after,
        "ignore_backoff": redrive.ignore_backoff,
        "concurrency": redrive.concurrency,
        "status": redrive.status,
        "reason": redrive.reason,
        "started_by": redrive.started_by,
        "matched": redrive.matched,
        "delivered": redrive.delivered,
        "failed": redrive.failed,
        "dropped": redrive.dropped,
        "moved": redrive.moved,
        "remaining": redrive.remaining,
        "gone": redrive.gone,
        "held": redrive.held,
        "waiting": redrive.waiting,
        "conflicts": redrive.conflicts,
        "until": bytes(redrive.until).hex() if redrive.until else None,
        "cursor": bytes(redrive.cursor).hex() if redrive.cursor else None,
        "created_at": when(redrive.created_at),
        "started_at": when(redrive.started_at),
        "finished_at": when(redrive.finished_at),
    }


def _refused(exc: redrives.RedriveError) -> CommandError:
    """The planner's refusal in argparse's words where it names an input (`argument
    --to: ...`), so a command line reads the same whichever rule refused it."""
    if exc.field is None:
        return CommandError(exc.message, returncode=2)
    option = "--to" if exc.field == "destination" else "--" + exc.field.replace("_", "-")
    return CommandError(f"argument {option}: {exc.message}", returncode=2)
