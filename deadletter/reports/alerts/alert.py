"""One alert as its channels send it: a title, a text of its figures, and an
absolute link to the admin's message list filtered to what it is about (the queue,
and for a cause its signature, as the overview's "failures by cause" links).

An alert carries the queue's name, a cause's signature (the exception's class and
text with numbers and ids removed) and counts: never a message's fields, so what
`DEADLETTER_REDACT` hides cannot reach an alert.
"""

from __future__ import annotations

import collections
import dataclasses
from datetime import datetime, timedelta
from typing import Any, Literal
from urllib.parse import urlencode

from django.urls import reverse

from deadletter.conf import conf

__all__ = ["Alert", "Kind", "admin_link", "span_text", "title_of"]

Kind = Literal["firing", "resolved", "digest"]
PREFIX = "[deadletter]"


@dataclasses.dataclass(frozen=True)
class Alert:
    """What goes out for one rule of one queue and subject (a cause's signature,
    or empty); a digest's `items` are the alerts it stands for."""

    rule: str
    queue: str
    subject: str
    kind: Kind
    title: str
    text: str
    link: str
    figures: dict[str, int | float | str]
    at: datetime
    items: tuple[Alert, ...] = ()

    def as_json(self) -> dict[str, Any]:
        """JSON-ready: what a webhook receives (times in ISO 8601)."""
        return {
            "rule": self.rule,
            "queue": self.queue,
            "subject": self.subject,
            "kind": self.kind,
            "title": self.title,
            "text": self.text,
            "link": self.link,
            "figures": dict(self.figures),
            "at": self.at.isoformat(),
            "items": [item.as_json() for item in self.items],
        }


def admin_link(queue: str = "", signature: str = "") -> str:
    """The absolute URL of the admin's message list filtered by `queue` and, for a
    cause, by its `signature` (the changelist's own `queue` and `cause` filters)."""
    base = (conf.SITE_URL or "").rstrip("/")
    path = reverse("admin:deadletter_queuedmessage_changelist")
    query = {k: v for k, v in (("queue", queue), ("cause", signature)) if v}
    return base + path + (f"?{urlencode(query)}" if query else "")


TITLES = {
    "new_cause": "new cause in {queue}: {subject}",
    "reopened_cause": "cause reopened in {queue}: {subject}",
    "depth": "{queue} holds more than {threshold} messages",
    "oldest_age": "oldest message in {queue} waits for {oldest_age}",
    "expiring": "{expiring} messages in {queue} expire soon",
    "breaker": "breaker tripped in {queue}",
    "stalled": "drain of {queue} stalled: no pass for {stalled_for}",
}


def title_of(rule: str, queue: str, subject: str, figures: dict[str, Any]) -> str:
    """The one line an alert is known by (a mail's subject)."""
    template = TITLES.get(rule, rule + " in {queue}")
    values = collections.defaultdict(str, figures, queue=queue, subject=subject)
    return f"{PREFIX} " + template.format_map(values)


def span_text(delta: timedelta) -> str:
    """A span in the two largest units that matter: "6 h 12 min", "3 d 2 h", "45 s"."""
    seconds = max(0, int(delta.total_seconds()))
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "min"), (secs, "s")]
    shown = [f"{n} {unit}" for n, unit in parts if n][:2]
    return " ".join(shown) or "0 s"


def render_text(title: str, figures: dict[str, Any], link: str) -> str:
    """The alert's body: its title, one line per figure, the link."""
    lines = [title, ""]
    lines += [f"{name.replace('_', ' ')}: {value}" for name, value in figures.items()]
    return "\n".join([*lines, "", link])
