"""Alerts through Django's locmem mail backend: once per rule, queue and cause, with
an absolute link the admin answers; a resolved note when it clears; a digest when
many fire at once; the stalled rule; the drain service's pass and the command as
triggers; and two evaluators at once sending one alert.

Failures come from a real drain with a failing handler, so the causes are the
ones the drain's `incidents.note_failure` records."""

from __future__ import annotations

import io
import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.core.management import CommandError, call_command
from django.db import connection, connections
from django.test import Client

from deadletter import signals
from deadletter.drain import Drainer, serve
from deadletter.models import AlertState, Cause
from deadletter.queue import incidents
from deadletter.reports.alerts import evaluate as evaluation
from deadletter.reports.alerts import state
from deadletter.reports.alerts.evaluate import evaluate
from tests.factories import BILLING_REDACT, EMAIL, park, park_aged, park_refund

pytestmark = pytest.mark.django_db(transaction=True)

SITE = "https://ops.example.com"
FAILING = "tests.factories.failing_handler"
OK = "tests.factories.ok_handler"
SIGNATURE = "ConnectionError: timeout after # s talking to #"


@pytest.fixture(autouse=True)
def mailed(settings: Any) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.ADMINS = [("Ops", "ops@example.com")]
    settings.DEADLETTER_SITE_URL = SITE
    settings.DEADLETTER_ALERTS = {
        "new_cause": True,
        "reopened_cause": True,
        "channels": ["mail_admins"],
    }
    settings.DEADLETTER_HANDLERS = {"billing": FAILING}


def subjects() -> list[str]:
    return [m.subject for m in mail.outbox]


def drain() -> None:
    Drainer().run()


def follow(link: str) -> str:
    """The admin's answer to an alert's link, as a signed-in operator opens it."""
    assert link.startswith(SITE + "/")
    parts = urlsplit(link)
    client = Client()
    client.force_login(User.objects.create_superuser("ops", "ops@example.com", "pw"))
    answer = client.get(f"{parts.path}?{parts.query}")
    assert answer.status_code == 200
    return answer.content.decode()


def test_a_new_cause_mails_the_admins_once_with_a_link_to_its_messages() -> None:
    park("invoice 1", queue="billing")
    drain()
    done = evaluate()
    assert (done.fired, done.sent) == (1, 1)
    (message,) = mail.outbox
    assert message.to == ["ops@example.com"]
    assert f"new cause in billing: {SIGNATURE}" in message.subject
    (alert,) = done.alerts
    assert alert.link in message.body
    assert alert.link == (
        f"{SITE}/admin/deadletter/queuedmessage/?queue=billing&cause="
        "ConnectionError%3A+timeout+after+%23+s+talking+to+%23"
    )
    assert "invoice 1" in follow(alert.link)
    assert alert.figures["count"] == 1
    assert evaluate().sent == 0 and len(mail.outbox) == 1


def test_a_second_failure_of_the_same_open_cause_mails_nothing() -> None:
    park("invoice 1", "invoice 2", queue="billing")
    drain()
    evaluate()
    drain()
    assert Cause.objects.get().count == 4
    assert evaluate().sent == 0
    assert len(mail.outbox) == 1


def test_a_resolved_cause_mails_a_resolved_note_and_reopens_when_it_fails_again() -> None:
    park("invoice 1", queue="billing")
    drain()
    evaluate()
    incidents.resolve([Cause.objects.get().id], actor="ops")
    done = evaluate()
    assert (done.cleared, done.sent) == (1, 1)
    assert f"resolved: new cause in billing: {SIGNATURE}" in mail.outbox[-1].subject
    drain()
    cause = Cause.objects.get()
    assert (cause.status, cause.reopened) == ("open", True)
    done = evaluate()
    assert done.sent == 1
    assert f"cause reopened in billing: {SIGNATURE}" in mail.outbox[-1].subject
    assert len(mail.outbox) == 3 and evaluate().sent == 0


def test_muted_and_acknowledged_causes_send_nothing(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"billing": FAILING, "shop": FAILING}
    park("invoice", queue="billing")
    park("order", queue="shop")
    drain()
    billing, shop = Cause.objects.order_by("queue")
    incidents.acknowledge([billing.id], owner="ops")
    incidents.mute([shop.id], until=datetime.now(UTC) + timedelta(hours=1), actor="ops")
    assert evaluate().sent == 0 and mail.outbox == []


def test_a_queue_over_its_depth_mails_once_and_a_resolved_note_when_it_drops_under(
    settings: Any,
) -> None:
    settings.DEADLETTER_ALERTS = {"depth": 2, "channels": ["mail_admins"]}
    settings.DEADLETTER_HANDLERS = {"orders": OK}
    park("a", "b", queue="orders")
    assert evaluate().sent == 0
    park("c", queue="orders")
    done = evaluate()
    assert subjects() == ["[Django] [deadletter] orders holds more than 2 messages"]
    assert done.alerts[0].figures["depth"] == "more than 2"
    assert done.alerts[0].link == f"{SITE}/admin/deadletter/queuedmessage/?queue=orders"
    park("d", queue="orders")
    assert evaluate().sent == 0
    drain()
    done = evaluate()
    assert done.cleared == 1
    assert subjects()[-1] == "[Django] [deadletter] resolved: orders holds more than 2 messages"
    assert len(mail.outbox) == 2 and evaluate().sent == 0


def test_a_queues_own_rules_override_the_global_ones(settings: Any) -> None:
    settings.DEADLETTER_ALERTS = {"depth": 100, "channels": ["mail_admins"]}
    settings.DEADLETTER_HANDLERS = {"orders": {"handler": OK, "alerts": {"depth": 1}}, "other": OK}
    park("a", "b", queue="orders")
    park("a", "b", queue="other")
    assert [a.queue for a in evaluate().alerts] == ["orders"]


def test_many_at_once_go_as_one_digest_then_at_most_one_digest_per_interval(
    settings: Any,
) -> None:
    queues = [f"q{i}" for i in range(7)]
    settings.DEADLETTER_ALERTS = {"depth": 1, "channels": ["mail_admins"]}
    settings.DEADLETTER_HANDLERS = dict.fromkeys([*queues, "late"], OK)
    for name in queues:
        park("a", "b", queue=name)
    t0 = datetime.now(UTC)
    done = evaluate(now=t0)
    assert (done.sent, done.digested) == (1, 7)
    (digest,) = done.alerts
    assert digest.kind == "digest" and len(digest.items) == 7
    assert subjects() == ["[Django] [deadletter] 7 alerts in q0, q1, q2 and 4 more queues"]
    assert all(item.link in mail.outbox[0].body for item in digest.items)
    park("a", "b", queue="late")
    assert evaluate(now=t0 + timedelta(minutes=1)).sent == 0
    assert len(mail.outbox) == 1
    done = evaluate(now=t0 + timedelta(minutes=11))  # held until the interval ended; alone now
    assert (done.sent, done.digested) == (1, 0)
    assert [(a.kind, a.queue) for a in done.alerts] == [("firing", "late")]
    assert evaluate(now=t0 + timedelta(minutes=30)).sent == 0
    assert len(mail.outbox) == 2


def test_the_command_says_which_alerts_wait_for_the_digest_and_until_when(
    settings: Any,
) -> None:
    queues = [f"q{i}" for i in range(7)]
    settings.DEADLETTER_ALERTS = {"depth": 1, "channels": ["mail_admins"]}
    settings.DEADLETTER_HANDLERS = dict.fromkeys([*queues, "late"], OK)
    for name in queues:
        park("a", "b", queue=name)
    t0 = datetime.now(UTC)
    assert evaluate(now=t0).digested == 7
    park("a", "b", queue="late")
    out = io.StringIO()
    call_command("deadletter_alerts", stdout=out)
    text = out.getvalue()
    assert "Fired 1, sent 0, cleared 0, digested 0." in text
    assert "Waiting for the next digest (firing): [deadletter] late" in text
    until = (t0 + timedelta(minutes=10)).isoformat(timespec="seconds")
    assert "1 alert(s) wait: a digest went out less than DEADLETTER_ALERT_DIGEST" in text
    assert f"they go out as one digest at the first evaluation from {until}." in text


def test_stalled_fires_only_once_a_drain_pass_was_seen_and_clears_on_the_next(
    settings: Any,
) -> None:
    settings.DEADLETTER_ALERTS = {"stalled": timedelta(minutes=15), "channels": ["mail_admins"]}
    settings.DEADLETTER_HANDLERS = {"orders": OK}
    done = evaluate()
    assert done.sent == 0
    assert done.notes == ["stalled: no drain pass recorded for orders, not evaluated"]
    drain()
    assert evaluate().sent == 0
    later = datetime.now(UTC) + timedelta(minutes=20)
    done = evaluate(now=later)
    assert done.sent == 1
    assert subjects()[0].startswith("[Django] [deadletter] drain of orders stalled: no pass for 2")
    assert evaluate(now=later + timedelta(minutes=1)).sent == 0
    drain()
    assert evaluate().cleared == 1
    assert subjects()[-1].startswith("[Django] [deadletter] resolved: drain of orders stalled")


def test_the_drain_service_evaluates_after_each_pass() -> None:
    park("invoice 1", queue="billing")
    serve(Drainer(), interval=0, passes=2)
    assert len(mail.outbox) == 1
    assert f"new cause in billing: {SIGNATURE}" in mail.outbox[0].subject


def test_a_failing_evaluation_is_logged_and_the_service_goes_on(
    settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.DEADLETTER_SITE_URL = None  # reverse() still works; the link is relative
    seen: list[int] = []

    def broken(sender: Any, **kwargs: Any) -> None:
        seen.append(1)
        raise RuntimeError("receiver broke")

    signals.drain_pass_finished.connect(broken)
    try:
        done = serve(Drainer(), interval=0, passes=2)
    finally:
        signals.drain_pass_finished.disconnect(broken)
    assert done.passes == 2 and seen == [1, 1]
    assert "drain_pass_finished receiver" in caplog.text and "receiver broke" in caplog.text


def test_the_command_sends_once_and_a_dry_run_writes_nothing() -> None:
    park("invoice 1", queue="billing")
    drain()
    out = io.StringIO()
    call_command("deadletter_alerts", "--dry-run", stdout=out)
    assert f"Would send (firing): [deadletter] new cause in billing: {SIGNATURE}" in out.getvalue()
    assert "Would fire 1, clear 0." in out.getvalue()
    assert mail.outbox == [] and not AlertState.objects.exists()
    out = io.StringIO()
    call_command("deadletter_alerts", stdout=out)
    assert f"Sent (firing): [deadletter] new cause in billing: {SIGNATURE}" in out.getvalue()
    assert "Fired 1, sent 1, cleared 0, digested 0." in out.getvalue()
    assert len(mail.outbox) == 1


def test_two_evaluators_at_once_send_one_alert(monkeypatch: pytest.MonkeyPatch) -> None:
    park("invoice 1", queue="billing")
    drain()
    sent: list[str] = []

    def counted(sender: Any, alert: Any, **kwargs: Any) -> None:
        sent.append(alert.title)

    both_claim = threading.Barrier(2, timeout=10)
    real_claim = state.claim_firing

    def claim_together(*args: Any) -> set[int]:
        both_claim.wait()  # both evaluators have read the alert as unsent
        return real_claim(*args)

    monkeypatch.setattr(state, "claim_firing", claim_together)
    results: list[evaluation.Evaluation] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(evaluate())
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    signals.alert.connect(counted)
    try:
        threads = [threading.Thread(target=run) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        signals.alert.disconnect(counted)
    assert errors == []
    assert sorted(r.sent for r in results) == [0, 1]
    assert len(sent) == 1 and len(mail.outbox) == 1
    assert AlertState.objects.get(rule="new_cause").sent_at is not None
    assert connection.vendor in ("sqlite", "postgresql", "mysql")


def test_a_cause_rule_turned_off_clears_its_alert_with_a_resolved_note(settings: Any) -> None:
    park("invoice 1", queue="billing")
    drain()
    evaluate()
    settings.DEADLETTER_ALERTS = {"channels": ["mail_admins"], "depth": 100}
    assert evaluate().cleared == 1
    assert f"resolved: new cause in billing: {SIGNATURE}" in mail.outbox[-1].subject


def test_the_command_exits_non_zero_on_a_database_error(unreachable_db: Any) -> None:
    with pytest.raises(CommandError) as failed:
        call_command("deadletter_alerts", stdout=io.StringIO())
    assert "cannot reach database 'default'" in str(failed.value)
    assert failed.value.returncode == 1


def test_an_oldest_message_past_its_age_fires_once(settings: Any) -> None:
    settings.DEADLETTER_ALERTS = {"oldest_age": timedelta(days=1), "channels": ["mail_admins"]}
    settings.DEADLETTER_HANDLERS = {"orders": OK}
    park("fresh", queue="orders")
    assert evaluate().sent == 0
    park_aged("orders", days_ago=2)
    done = evaluate()
    (alert,) = done.alerts
    assert (alert.rule, alert.queue, done.sent) == ("oldest_age", "orders", 1)
    assert "orders" in mail.outbox[0].subject and alert.link in mail.outbox[0].body
    assert evaluate().sent == 0 and len(mail.outbox) == 1


def test_messages_about_to_expire_fire_once(settings: Any) -> None:
    settings.DEADLETTER_ALERTS = {"expiring": timedelta(days=2), "channels": ["mail_admins"]}
    settings.DEADLETTER_HANDLERS = {"orders": OK}
    park_aged("orders", days_ago=5)  # 25 days left of the 30-day age limit
    assert evaluate().sent == 0
    park_aged("orders", days_ago=29, seq=2)  # one day left
    done = evaluate()
    (alert,) = done.alerts
    assert (alert.rule, alert.queue, done.sent) == ("expiring", "orders", 1)
    assert evaluate().sent == 0 and len(mail.outbox) == 1


def test_a_tripped_breaker_fires_once(settings: Any) -> None:
    settings.DEADLETTER_ALERTS = {"breaker": True, "channels": ["mail_admins"]}
    settings.DEADLETTER_HANDLERS = {"billing": {"handler": FAILING, "breaker": 2}}
    park("a", "b", "c", "d", queue="billing")
    drain()
    done = evaluate()
    (alert,) = done.alerts
    assert (alert.rule, alert.queue, done.sent) == ("breaker", "billing", 1)
    assert evaluate().sent == 0 and len(mail.outbox) == 1


def test_a_redacted_value_never_appears_in_an_alert(settings: Any) -> None:
    """Alerts carry the queue, the cause and figures, never a message's fields: what
    DEADLETTER_REDACT names stays out of the mail and of the webhook's JSON."""
    settings.DEADLETTER_REDACT = {"billing": ["username", "fields[0]", "card_number"]}
    settings.DEADLETTER_ALERTS = {"new_cause": True, "depth": 1, "channels": ["mail_admins"]}
    secret_values = ("ada@example.com", "4111111111111111")
    for n in range(2):
        park(
            f"invoice {n}",
            queue="billing",
            username=secret_values[0],
            fields=[secret_values[1]],
            extra={"card_number": secret_values[1]},
        )
    drain()
    done = evaluate()
    assert done.sent >= 1 and mail.outbox
    said = [m.subject + m.body for m in mail.outbox]
    said += [json.dumps(alert.as_json()) for alert in done.alerts]
    for value in secret_values:
        assert not any(value in text for text in said)


def test_an_error_quoting_a_redacted_value_is_masked_in_the_alert(settings: Any) -> None:
    """The cause's signature, which an alert's title carries, is written with the
    values DEADLETTER_REDACT names masked: two customers' refusals are one cause."""
    settings.DEADLETTER_REDACT = BILLING_REDACT
    settings.DEADLETTER_HANDLERS = {"billing.refunds": "tests.factories.refusing_handler"}
    park_refund()
    park("refund two", queue="billing.refunds", username="bob.smith@example.org")
    drain()
    done = evaluate()
    assert done.sent == 1
    (message,) = mail.outbox
    assert "RecipientRefused: <•••> refused" in message.subject + message.body
    said = message.subject + message.body + json.dumps(done.alerts[0].as_json())
    assert EMAIL not in said and "bob.smith@example.org" not in said
