"""One evaluation of the alert rules: what holds now, what fired, what cleared, and
what goes out, once.

What holds is read in a few bounded statements (`figures`) and, for the cause
rules, from the causes opened since the last evaluation looked (`queue.incidents`;
muted and acknowledged causes are not open, so they send nothing). Each (rule,
queue, subject) fires once (`state.fire`) and is sent by the one evaluator that
claims its row; it goes out again only after it cleared: the condition no longer
holds, or its cause was resolved (then a "resolved" note goes once).

When more than `DIGEST_AFTER` alerts would go out in one evaluation, or a digest
went out less than `DEADLETTER_ALERT_DIGEST` ago, they go as one digest (kind
"digest", the alerts in `items`), at most one per that interval; until then they
wait, claimed by nobody, for the next evaluation.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from deadletter.conf import conf
from deadletter.models import AlertState, Cause
from deadletter.queue import incidents
from deadletter.reports.alerts import channels, state
from deadletter.reports.alerts.alert import Alert, admin_link, render_text, span_text, title_of
from deadletter.reports.alerts.figures import QueueFigures, heads, queues_of, read_figures
from deadletter.reports.alerts.rules import Rules, any_rule_on, configured_queues, rules_for
from deadletter.store import reconnect, sql

__all__ = ["DIGEST_AFTER", "Evaluation", "evaluate", "on_drain_pass"]

logger = logging.getLogger("deadletter")

DIGEST_AFTER = 5
"""More alerts than this in one evaluation go out as one digest."""

LOOK_OVERLAP = timedelta(minutes=1)
"""Causes opened this long before the last look are read again: a failure's
transaction may commit after an evaluation that began later (firing is idempotent)."""

CAUSE_RULES = ("new_cause", "reopened_cause")

Key = tuple[str, str, str]
Sender = Callable[[Alert, Sequence[Any]], list[str]]


@dataclasses.dataclass
class Finding:
    """A rule that holds now for a queue and subject."""

    title: str
    figures: dict[str, int | float | str]
    link: str
    opened_at: datetime | None = None  # a cause's, to tell a later opening


@dataclasses.dataclass
class Evaluation:
    """What one evaluation did (or, in a dry run, would do): `alerts` went out (a
    digest counts once in `sent`, its items in `digested`), `failed` the channels that
    could not take one (parked in `deadletter.alerts`), `notes` what was not evaluated,
    `waiting` the alerts held for the next digest, which may go out from
    `waiting_until` (a digest went out less than `DEADLETTER_ALERT_DIGEST` ago)."""

    fired: int = 0
    sent: int = 0
    cleared: int = 0
    digested: int = 0
    alerts: list[Alert] = dataclasses.field(default_factory=list)
    failed: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    waiting: list[Alert] = dataclasses.field(default_factory=list)
    waiting_until: datetime | None = None


def evaluate(
    *, now: datetime | None = None, dry_run: bool = False, send: Sender | None = None
) -> Evaluation:
    """Evaluate every rule once; `dry_run` writes nothing and sends nothing (its
    `alerts` are what would go out, one by one). `send` is `channels.send` unless given."""
    now = now or datetime.now(UTC)
    result = Evaluation()
    queues = [q for q in configured_queues() if q != channels.QUEUE]
    if not any_rule_on(queues):
        return result
    connection = sql.connection()
    head_keys = {q: k for q, k in heads(connection).items() if q != channels.QUEUE}
    rules = {q: rules_for(q) for q in queues_of(queues, head_keys)}
    figures = read_figures(connection, rules, head_keys, now)
    findings = _metric_findings(rules, figures, now, result.notes)
    since = state.last_looked()
    causes = incidents.open_causes(None if since is None else since - LOOK_OVERLAP, at=now)
    findings.update(_cause_findings(causes, rules, figures, now))
    firing = state.firing_rows()
    refire, clear, keep = _settle(firing, findings, now)
    if dry_run:
        return _dry_run(result, findings, firing, refire, clear, now)
    for row in clear:
        result.cleared += state.clear(row, now)
    for row in refire:
        found = findings[state.key_of(row)]
        assert found.opened_at is not None
        result.fired += state.refire(row, found.opened_at, now, found.title, found.figures)
    firing_keys = {state.key_of(row) for row in firing}
    for key, found in findings.items():
        if key not in firing_keys:
            result.fired += state.fire(key, found.title, found.figures, now)
    wanted = {**keep, **{k: f for k, f in findings.items() if k not in firing_keys}}
    wanted.update({state.key_of(row): findings[state.key_of(row)] for row in refire})
    _send(result, wanted, now, send or channels.send)
    state.looked(now)
    return result


def on_drain_pass(sender: Any, **kwargs: Any) -> None:
    """The drain service's `drain_pass_finished`: evaluate, logging what went out;
    a failure is logged and the service goes on."""
    try:
        done = evaluate()
    except Exception:  # the drain must go on whatever an evaluation meets
        logger.exception("alert evaluation failed")
        reconnect.close_if_lost(sql.connection())
        return
    if done.fired or done.sent or done.cleared:
        logger.info(
            "alerts fired=%s sent=%s cleared=%s digested=%s",
            done.fired,
            done.sent,
            done.cleared,
            done.digested,
        )


def _metric_findings(
    rules: Mapping[str, Rules],
    figures: Mapping[str, QueueFigures],
    now: datetime,
    notes: list[str],
) -> dict[Key, Finding]:
    found: dict[Key, Finding] = {}
    for queue, fig in figures.items():
        rule = rules[queue]
        age = fig.oldest_age(now)
        common: dict[str, int | float | str] = {}
        if age is not None:
            common["oldest_age"] = span_text(age)
        holds: list[tuple[str, dict[str, int | float | str]]] = []
        if rule.depth and fig.depth is not None and fig.depth > rule.depth:
            holds.append(("depth", {"depth": f"more than {rule.depth:,}", "threshold": rule.depth}))
        if rule.oldest_age and age is not None and age > rule.oldest_age:
            holds.append(("oldest_age", {"threshold": span_text(rule.oldest_age)}))
        if rule.expiring and fig.expiring:
            many = f"more than {fig.expiring - 1}" if fig.expiring > 100 else fig.expiring
            holds.append(("expiring", {"expiring": many, "within": span_text(rule.expiring)}))
        if rule.breaker and fig.paused:
            holds.append(("breaker", {"paused_at": _iso(fig.last_pass)}))
        if rule.stalled and fig.last_pass is None:
            notes.append(f"stalled: no drain pass recorded for {queue}, not evaluated")
        elif rule.stalled and fig.last_pass is not None and now - fig.last_pass > rule.stalled:
            holds.append(
                (
                    "stalled",
                    {
                        "stalled_for": span_text(now - fig.last_pass),
                        "last_pass": _iso(fig.last_pass),
                    },
                )
            )
        for name, own in holds:
            values = {**common, **own}
            found[(name, queue, "")] = Finding(
                title_of(name, queue, "", values), values, admin_link(queue)
            )
    return found


def _cause_findings(
    causes: Sequence[Cause],
    rules: dict[str, Rules],
    figures: Mapping[str, QueueFigures],
    now: datetime,
) -> dict[Key, Finding]:
    found: dict[Key, Finding] = {}
    for cause in causes:
        if cause.queue == channels.QUEUE:
            continue
        rule = rules.get(cause.queue) or rules.setdefault(cause.queue, rules_for(cause.queue))
        name = "reopened_cause" if cause.reopened else "new_cause"
        if not getattr(rule, name):
            continue
        values: dict[str, int | float | str] = {
            "count": cause.count,
            "first_seen": _iso(cause.first_seen),
            "last_seen": _iso(cause.last_seen),
        }
        fig = figures.get(cause.queue)
        age = fig.oldest_age(now) if fig is not None else None
        if age is not None:
            values["oldest_age"] = span_text(age)
        key = (name, cause.queue, cause.signature)
        found[key] = Finding(
            title_of(name, cause.queue, cause.signature, values),
            values,
            admin_link(cause.queue, cause.signature),
            opened_at=cause.opened_at,
        )
    return found


def _settle(
    firing: list[AlertState], findings: dict[Key, Finding], now: datetime
) -> tuple[list[AlertState], list[AlertState], dict[Key, Finding]]:
    """Of the firing rows: those to fire again (a later opening of their cause),
    those to clear, and those still holding but unsent (to send now)."""
    refire, clear, keep = [], [], {}
    cause_rows = [row for row in firing if row.rule in CAUSE_RULES]
    causes = _causes_of(cause_rows)
    for row in firing:
        key = state.key_of(row)
        if row.rule not in CAUSE_RULES:
            if key not in findings:
                clear.append(row)
            elif row.sent_at is None:
                keep[key] = findings[key]
            continue
        cause = causes.get((row.queue, row.subject))
        later = cause is not None and cause.opened_at > row.fired_at
        turned_off = not getattr(rules_for(row.queue), row.rule)
        if later and key in findings:
            refire.append(row)
        elif cause is None or later or turned_off or cause.status == Cause.Status.RESOLVED:
            clear.append(row)
        elif row.sent_at is None and incidents.effective_status(cause, now) == Cause.Status.OPEN:
            keep[key] = findings.get(key) or _stored_finding(row)
    return refire, clear, keep


def _causes_of(rows: list[AlertState]) -> dict[tuple[str, str], Cause]:
    if not rows:
        return {}
    found = incidents.causes().filter(
        queue__in={r.queue for r in rows}, signature__in={r.subject for r in rows}
    )
    return {(c.queue, c.signature): c for c in found}


def _stored_finding(row: AlertState) -> Finding:
    saved = state.stored(row)
    kept = saved.get("figures")
    figures: dict[str, int | float | str] = kept if isinstance(kept, dict) else {}
    title = saved.get("title") or title_of(row.rule, row.queue, row.subject, figures)
    return Finding(str(title), figures, admin_link(row.queue, _signature(row)))


def _signature(row: AlertState) -> str:
    return row.subject if row.rule in CAUSE_RULES else ""


def _send(result: Evaluation, wanted: dict[Key, Finding], now: datetime, send: Sender) -> None:
    """Claim what is to go out, send it (one by one, or as one digest), mark it sent."""
    me = state.evaluator_id()
    pending = state.unsent(wanted)
    won = state.claim_firing([row.id for row in pending], me, now)
    resolved = state.unsent_resolved()
    won_resolved = state.claim_resolved([row.id for row in resolved], me, now)
    outgoing: list[tuple[AlertState, Alert]] = [
        (row, _alert(row, "firing", wanted[state.key_of(row)], now))
        for row in pending
        if row.id in won
    ]
    outgoing += [
        (row, _alert(row, "resolved", _stored_finding(row), now))
        for row in resolved
        if row.id in won_resolved
    ]
    if not outgoing:
        return
    last = state.last_digest()
    recent = last is not None and now - last < conf.ALERT_DIGEST
    if len(outgoing) > DIGEST_AFTER or recent:
        if not state.claim_digest(now, conf.ALERT_DIGEST):
            state.release([row.id for row, _ in outgoing], me)
            result.waiting = [a for _, a in outgoing]
            result.waiting_until = (state.last_digest() or now) + conf.ALERT_DIGEST
            return
        digest = _digest([a for _, a in outgoing], now)
        if _deliver(result, digest, _channels_of([row.queue for row, _ in outgoing]), send):
            result.digested += len(outgoing)
            _mark(outgoing, me, now)
        else:
            state.release([row.id for row, _ in outgoing], me)
        return
    for row, alert in outgoing:
        if _deliver(result, alert, rules_for(row.queue).channels, send):
            _mark([(row, alert)], me, now)
        else:
            state.release([row.id], me)


def _deliver(result: Evaluation, alert: Alert, specs: Sequence[Any], send: Sender) -> bool:
    """Hand `alert` to its channels; False (logged) when sending itself raised,
    so that the alert stays unsent for the next evaluation."""
    try:
        failed = send(alert, specs)
    except Exception:  # a channel module's bug must not lose the alert
        logger.exception("alert not sent rule=%s queue=%s", alert.rule, alert.queue)
        return False
    result.sent += 1
    result.alerts.append(alert)
    result.failed += failed
    return True


def _mark(sent: list[tuple[AlertState, Alert]], me: str, now: datetime) -> None:
    state.mark_sent([row.id for row, a in sent if a.kind == "firing"], me, now)
    state.mark_resolved_sent([row.id for row, a in sent if a.kind == "resolved"], me, now)


def _alert(row: AlertState, kind: str, found: Finding, now: datetime) -> Alert:
    title = found.title
    if kind == "resolved":
        title = "[deadletter] resolved: " + title.removeprefix("[deadletter] ")
    return Alert(
        rule=row.rule,
        queue=row.queue,
        subject=row.subject,
        kind="resolved" if kind == "resolved" else "firing",
        title=title,
        text=render_text(title, found.figures, found.link),
        link=found.link,
        figures=found.figures,
        at=now,
    )


def _digest(items: list[Alert], now: datetime) -> Alert:
    queues = sorted({a.queue for a in items})
    title = f"[deadletter] {len(items)} alerts in {', '.join(queues[:3])}"
    title += f" and {len(queues) - 3} more queues" if len(queues) > 3 else ""
    link = admin_link()
    text = "\n".join([title, "", *(f"- {a.title}\n  {a.link}" for a in items), "", link])
    figures: dict[str, int | float | str] = {"alerts": len(items), "queues": len(queues)}
    return Alert(
        rule="digest",
        queue="",
        subject="",
        kind="digest",
        title=title,
        text=text,
        link=link,
        figures=figures,
        at=now,
        items=tuple(items),
    )


def _channels_of(queues: Sequence[str]) -> list[Any]:
    """Every channel of `queues`, each once (a digest goes where any item would)."""
    found: list[Any] = []
    for queue in queues:
        for spec in rules_for(queue).channels:
            if spec not in found:
                found.append(spec)
    return found


def _dry_run(
    result: Evaluation,
    findings: dict[Key, Finding],
    firing: list[AlertState],
    refire: list[AlertState],
    clear: list[AlertState],
    now: datetime,
) -> Evaluation:
    """What an evaluation would fire and clear, from what it read; nothing written."""
    rows = {state.key_of(row): row for row in firing}
    again = {state.key_of(row) for row in refire}
    for key, found in findings.items():
        row = rows.get(key)
        if row is None or key in again or row.sent_at is None:
            result.fired += row is None or key in again
            probe = row or AlertState(rule=key[0], queue=key[1], subject=key[2])
            result.alerts.append(_alert(probe, "firing", found, now))
    for row in clear:
        result.cleared += 1
        if row.sent_at is not None:
            result.alerts.append(_alert(row, "resolved", _stored_finding(row), now))
    return result


def _iso(moment: datetime | None) -> str:
    return "" if moment is None else moment.isoformat()
