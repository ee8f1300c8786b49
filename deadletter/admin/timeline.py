"""A message's attempts as a timeline (`queue.history`): when, how long, what came of
it, the error, who tried. The live message page shows it, and so does the archive's
page of an archived key: the history is kept by key, so both read the same rows."""

from __future__ import annotations

from django.template.loader import render_to_string
from django.utils.safestring import SafeString, mark_safe

from deadletter.queue import history
from deadletter.queue.redaction import Scrub

__all__ = ["TEMPLATE", "timeline_html"]

TEMPLATE = "admin/deadletter/queuedmessage/attempt_timeline.html"


def duration_text(seconds: float | None) -> str:
    """A handler's run time as an operator reads it: ms below a second; "unknown"
    for a killed process's."""
    if seconds is None:
        return "unknown"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.1f} s"


def timeline_html(key: bytes, scrub: Scrub) -> SafeString:
    """The recorded attempts of `key`, oldest first, as an HTML table (escaped by
    the template); a sentence when there is none. Errors are shown through `scrub`
    (the row's `rows.scrubbed`): one may quote a value the viewer may not see."""
    attempts = [
        {
            "at": attempt.at,
            "duration": duration_text(attempt.duration),
            "outcome": attempt.outcome,
            "error": scrub(attempt.error),
            "actor": attempt.actor,
        }
        for attempt in history.attempts_of(key)
    ]
    html = render_to_string(TEMPLATE, {"attempts": attempts, "keep": history.KEEP})
    return mark_safe(html)  # noqa: S308  # rendered by the template engine, which escapes
