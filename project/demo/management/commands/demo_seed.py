"""Park a few realistic failed messages so the admin has something to show."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand

from deadletter.queue import fetch_failed_msgs, store_failed_msgs
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import EventCode, Message
from project.demo.tasks import charge_card

DEMO = [
    ("webhook-queue", "ucenik1@skole.hr", "Ocjena: Matematika", EventCode.GRADE, ["Ocjena", "5"]),
    ("webhook-queue", "ucenik2@skole.hr", "Pisana provjera iz fizike", EventCode.EXAM, ["03.12."]),
    ("telegram-queue", "ucenik1@skole.hr", "Lektira: Družba Pere Kvržice", EventCode.READING, []),
    ("telegram-queue", "ucenik3@skole.hr", "Zaključna ocjena", EventCode.FINAL_GRADE, ["4"]),
    ("discord-queue", "ucenik2@skole.hr", "Nacionalni ispit", EventCode.NATIONAL_EXAM, ["15.05."]),
]


class Command(BaseCommand):
    help = "Park demo failed messages in the queues (only into queues that are empty)."

    def handle(self, *args: Any, **options: Any) -> None:
        now = datetime.now(UTC)
        parked = {q: {m.msg.subject for m in fetch_failed_msgs(q)} for q, *_ in DEMO}
        stored = 0
        for index, (queue, user, subject, code, fields) in enumerate(DEMO):
            if subject in parked[queue]:
                continue
            age = timedelta(minutes=30 * (len(DEMO) - index))
            store_failed_msgs(
                queue,
                Message(
                    timestamp=GoTime.from_datetime(now - age - timedelta(seconds=5)),
                    queued_at=GoTime.from_datetime(now - age),
                    username=user,
                    subject=subject,
                    descriptions=["Polje"] * len(fields),
                    fields=fields,
                    code=code,
                ),
            )
            stored += 1
        if not fetch_failed_msgs("celery.celery"):
            # Run in-process as a worker would run it: it fails after its two
            # retries and the capture parks it; no broker or worker is needed.
            charge_card.apply(args=(1042, 2599), kwargs={"currency": "EUR"})
            stored += 1
        self.stdout.write(f"Parked {stored} demo message(s).")
