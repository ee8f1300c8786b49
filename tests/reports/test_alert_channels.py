"""Alert channels (`reports.alerts.channels`): mail_admins on the locmem backend, a
signed webhook against a real local HTTP receiver, the `alert` signal, and an alert
a channel could not take parked in `deadletter.alerts` and sent by a later drain."""

from __future__ import annotations

import contextlib
import http.server
import json
import logging
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.core.management import call_command
from rest_framework.test import APIClient

from deadletter import signals
from deadletter.checks import check_settings
from deadletter.drain import Drainer
from deadletter.models import ArchivedMessage, QueuedMessage
from deadletter.queue import fetch_failed_msgs, store_failed_msgs
from deadletter.queue.alert_channels import channel_of
from deadletter.reports.alerts import channels, redeliver, webhook
from deadletter.reports.alerts.alert import Alert
from deadletter.reports.alerts.channels import ALERT_KEY, CHANNEL_KEY, QUEUE, send
from deadletter.wire.messages import Message
from tests.factories import REPO

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "s3cret-never-parked"
LINK = "https://ops.example.com/admin/deadletter/queuedmessage/?queue=webhooks"


def an_alert(**changes: Any) -> Alert:
    values: dict[str, Any] = {
        "rule": "new_cause",
        "queue": "webhooks",
        "subject": "ConnectionError: refused by #",
        "kind": "firing",
        "title": "[deadletter] new cause in webhooks: ConnectionError: refused by #",
        "text": "A new cause of failures in webhooks.",
        "link": LINK,
        "figures": {"count": 3, "depth": 12},
        "at": datetime(2026, 12, 2, 15, 0, tzinfo=UTC),
    }
    return Alert(**{**values, **changes})


@dataclass
class Received:
    body: bytes
    timestamp: str
    signature: str
    content_type: str
    verified: bool


@dataclass
class Receiver:
    """A webhook receiver on 127.0.0.1 that checks each request with `verify` and
    answers `status` (its own, whatever the signature, when `status` is not 200)."""

    url: str = ""
    status: int = 200
    secret: str = SECRET
    got: list[Received] = field(default_factory=list)


@contextlib.contextmanager
def serving(port: int = 0) -> Iterator[Receiver]:
    """A `Receiver` listening on `port` of 127.0.0.1 (any free one for 0)."""
    state = Receiver()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            timestamp = self.headers.get(webhook.TIMESTAMP_HEADER, "")
            signature = self.headers.get(webhook.SIGNATURE_HEADER, "")
            verified = webhook.verify(body, timestamp, signature, state.secret)
            state.got.append(
                Received(body, timestamp, signature, self.headers["Content-Type"], verified)
            )
            status = state.status if state.status != 200 else (200 if verified else 401)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_port}/hooks/deadletter"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with serving() as state:
        yield state


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(autouse=True)
def alert_settings(settings: Any) -> None:
    settings.ADMINS = [("Ops", "ops@example.com")]  # the form Django 5.2 reads too
    settings.DEADLETTER_BACKOFF = None
    settings.DEADLETTER_MAX_ATTEMPTS = None
    settings.DEADLETTER_BREAKER = None


def configure(settings: Any, *specs: Any) -> None:
    settings.DEADLETTER_ALERTS = {"new_cause": True, "channels": list(specs)}


def hook(url: str, secret: str = SECRET) -> dict[str, str]:
    return {"webhook": url, "secret": secret}


# --- mail_admins ------------------------------------------------------------------


def test_mail_admins_sends_one_mail_with_the_title_the_link_and_the_figures() -> None:
    assert send(an_alert(), ["mail_admins"]) == []
    assert len(mail.outbox) == 1
    sent = mail.outbox[0]
    assert sent.to == ["ops@example.com"]
    assert an_alert().title in sent.subject
    assert LINK in sent.body
    assert "A new cause of failures in webhooks." in sent.body
    assert "count: 3" in sent.body and "depth: 12" in sent.body


def test_a_title_of_several_lines_is_one_subject_line() -> None:
    send(an_alert(title="[deadletter] two\nlines"), ["mail_admins"])
    assert mail.outbox[0].subject.endswith("[deadletter] two lines")


# --- the webhook ------------------------------------------------------------------


def test_the_webhook_posts_the_alerts_json_signed_and_the_receiver_verifies_it(
    receiver: Receiver,
) -> None:
    assert send(an_alert(), [hook(receiver.url)]) == []
    [got] = receiver.got
    assert got.verified
    assert got.content_type == "application/json"
    assert got.signature.startswith("v1=")
    assert json.loads(got.body) == an_alert().as_json()
    assert got.body == json.dumps(an_alert().as_json()).encode()


def test_a_tampered_body_a_wrong_secret_and_an_old_timestamp_are_refused(
    receiver: Receiver,
) -> None:
    send(an_alert(), [hook(receiver.url)])
    [got] = receiver.got
    sent_at = int(got.timestamp)
    assert webhook.verify(got.body, got.timestamp, got.signature, SECRET, now=sent_at)
    tampered = got.body.replace(b'"depth": 12', b'"depth": 13')
    assert tampered != got.body
    assert not webhook.verify(tampered, got.timestamp, got.signature, SECRET, now=sent_at)
    assert not webhook.verify(got.body, got.timestamp, got.signature, "other", now=sent_at)
    # The same request replayed later than the tolerance, or with a fresh timestamp.
    assert not webhook.verify(got.body, got.timestamp, got.signature, SECRET, now=sent_at + 301)
    assert webhook.verify(got.body, got.timestamp, got.signature, SECRET, now=sent_at + 299)
    fresh = str(sent_at + 600)
    assert not webhook.verify(got.body, fresh, got.signature, SECRET, now=sent_at + 600)
    assert not webhook.verify(got.body, "", got.signature, SECRET)
    assert not webhook.verify(got.body, "1e9", got.signature, SECRET)
    assert not webhook.verify(got.body, got.timestamp, "v1=\u00e9", SECRET, now=sent_at)


def test_a_receiver_with_another_secret_refuses_the_request_and_the_alert_is_parked(
    receiver: Receiver,
) -> None:
    receiver.secret = "not-the-same"
    assert send(an_alert(), [hook(receiver.url)]) == [receiver.url]
    assert [r.verified for r in receiver.got] == [False]
    assert QueuedMessage.objects.of_queue(QUEUE).count() == 1


def test_a_redirect_is_a_failure(receiver: Receiver) -> None:
    receiver.status = 302
    assert send(an_alert(), [hook(receiver.url)]) == [receiver.url]


def test_a_url_that_is_not_http_is_refused_and_not_parked(tmp_path: Any) -> None:
    target = tmp_path / "alerts"
    bad = hook(f"file://{target}")
    assert send(an_alert(), [bad, "sms"]) == [bad["webhook"], "sms"]
    assert not target.exists()
    assert QueuedMessage.objects.of_queue(QUEUE).count() == 0


# --- failures parked, and sent by a later drain -----------------------------------


def test_a_webhook_answering_500_parks_the_alert_and_a_later_drain_sends_it(
    receiver: Receiver, settings: Any
) -> None:
    configure(settings, hook(receiver.url))
    receiver.status = 500
    assert send(an_alert(), [hook(receiver.url)]) == [receiver.url]
    [item] = fetch_failed_msgs(QUEUE)
    assert item.msg.extra[ALERT_KEY] == an_alert().as_json()
    assert item.msg.extra[CHANNEL_KEY] == {"kind": "webhook", "index": 0, "url": receiver.url}
    assert "HTTP 500" in item.msg.extra["LastError"]

    still = Drainer([QUEUE]).run()
    assert (still.delivered, still.failed) == (0, 1)
    assert QueuedMessage.objects.of_queue(QUEUE).count() == 1

    receiver.status = 200
    report = Drainer([QUEUE]).run()
    assert (report.delivered, report.failed) == (1, 0)
    assert QueuedMessage.objects.of_queue(QUEUE).count() == 0
    assert len(receiver.got) == 3 and all(r.verified for r in receiver.got)
    assert json.loads(receiver.got[-1].body) == an_alert().as_json()


def test_a_closed_port_parks_the_alert_and_deadletter_drain_sends_it_once_it_answers(
    closed_port: int, settings: Any
) -> None:
    url = f"http://127.0.0.1:{closed_port}/hooks/deadletter"
    configure(settings, "mail_admins", hook(url))
    assert send(an_alert(), ["mail_admins", hook(url)]) == [url]
    assert len(mail.outbox) == 1
    [item] = fetch_failed_msgs(QUEUE)
    assert item.msg.extra[CHANNEL_KEY] == {"kind": "webhook", "index": 1, "url": url}
    assert "could not be reached" in item.msg.extra["LastError"]
    with serving(closed_port) as receiver:
        call_command("deadletter_drain", "--queue", QUEUE)
        assert [r.verified for r in receiver.got] == [True]
    assert QueuedMessage.objects.of_queue(QUEUE).count() == 0
    assert len(mail.outbox) == 1  # the mail went at once, and only once


def test_a_webhook_no_longer_in_the_settings_is_dropped_to_the_archive_unsent(
    receiver: Receiver, settings: Any
) -> None:
    receiver.status = 500
    send(an_alert(), [hook(receiver.url)])
    configure(settings, "mail_admins")
    receiver.status = 200
    report = Drainer([QUEUE]).run()
    assert (report.delivered, report.dropped["permanent"]) == (0, 1)
    assert len(receiver.got) == 1
    [entry] = ArchivedMessage.objects.filter(queue=QUEUE)
    assert entry.reason == "permanent"
    assert "no longer in DEADLETTER_ALERTS" in entry.last_error


def test_the_secret_is_not_in_the_parked_row_and_is_read_from_the_settings_again(
    receiver: Receiver, settings: Any
) -> None:
    receiver.status = 500
    send(an_alert(), [hook(receiver.url)])
    [value] = QueuedMessage.objects.of_queue(QUEUE).values_list("value", flat=True)
    assert SECRET.encode() not in bytes(value)
    # The secret was rotated since: the redelivery signs under the new one.
    receiver.secret = "rotated"
    receiver.status = 200
    configure(settings, hook(receiver.url, "rotated"))
    assert Drainer([QUEUE]).run().delivered == 1
    assert receiver.got[-1].verified


def test_a_queues_own_channels_are_looked_up_before_the_global_ones(settings: Any) -> None:
    url = "https://hooks.example.com/deadletter"
    settings.DEADLETTER_HANDLERS = {
        "webhooks": {
            "handler": "tests.factories.ok_handler",
            "alerts": {"channels": ["mail_admins", hook(url, "the queue's")]},
        },
    }
    configure(settings, hook(url, "global"), hook("https://other.example.com/", "x"))
    assert redeliver.configured_webhook(url, ["webhooks"]) == channel_of(hook(url, "the queue's"))
    assert redeliver.configured_webhook(url, ["payments"]) == channel_of(hook(url, "the queue's"))
    assert redeliver.configured_webhook("https://other.example.com/") == channel_of(
        hook("https://other.example.com/", "x")
    )
    assert redeliver.configured_webhook("https://gone.example.com/", ["webhooks"]) is None
    settings.DEADLETTER_HANDLERS = {
        "webhooks": {"handler": "tests.factories.ok_handler", "alerts": {"channels": []}},
        "payments": {
            "handler": "tests.factories.ok_handler",
            "alerts": {"channels": [hook(url, "payments'")]},
        },
    }
    assert redeliver.configured_webhook(url, ["webhooks"]) == channel_of(hook(url, "payments'"))
    configure(settings, hook(url, "global"))
    assert redeliver.configured_webhook(url, ["webhooks", "payments"]) == channel_of(
        hook(url, "payments'")
    )


def test_a_digest_finds_its_webhook_under_its_items_queues(
    receiver: Receiver, settings: Any
) -> None:
    settings.DEADLETTER_HANDLERS = {
        "webhooks": {
            "handler": "tests.factories.ok_handler",
            "alerts": {"channels": [hook(receiver.url)]},
        },
    }
    settings.DEADLETTER_ALERTS = {}
    digest = an_alert(rule="digest", kind="digest", queue="", subject="", items=(an_alert(),))
    receiver.status = 500
    assert send(digest, [hook(receiver.url)]) == [receiver.url]
    receiver.status = 200
    assert redeliver.configured_webhook(receiver.url, ["webhooks"]) == channel_of(
        hook(receiver.url)
    )
    [item] = fetch_failed_msgs(QUEUE)
    redeliver.handle(item.msg)
    assert [r.verified for r in receiver.got] == [True, True]
    assert json.loads(receiver.got[-1].body)["items"] == [an_alert().as_json()]


def test_a_failing_mail_backend_parks_the_alert_and_a_drain_mails_it(
    settings: Any, closed_port: int
) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = closed_port
    settings.EMAIL_TIMEOUT = 2
    assert send(an_alert(), ["mail_admins"]) == ["mail_admins"]
    [item] = fetch_failed_msgs(QUEUE)
    assert item.msg.extra[CHANNEL_KEY] == {"kind": "mail_admins", "index": 0}
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    assert Drainer([QUEUE]).run().delivered == 1
    assert len(mail.outbox) == 1
    assert LINK in mail.outbox[0].body
    assert QueuedMessage.objects.of_queue(QUEUE).count() == 0


def test_an_alert_parked_by_anyone_else_is_never_sent(receiver: Receiver, settings: Any) -> None:
    configure(settings, hook(receiver.url))
    forged = {
        ALERT_KEY: {"title": "pay now", "text": "forged"},
        CHANNEL_KEY: {"kind": "webhook", "index": 0, "url": receiver.url},
    }
    store_failed_msgs(QUEUE, Message(subject="forged", extra=forged))
    report = Drainer([QUEUE]).run()
    assert (report.delivered, report.held) == (0, 1)
    assert receiver.got == []
    assert QueuedMessage.objects.of_queue(QUEUE).count() == 1


# --- the signal -------------------------------------------------------------------


def test_the_signal_is_sent_once_per_alert_whatever_the_channels_did(
    receiver: Receiver, closed_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    heard: list[tuple[Any, Alert]] = []

    def listener(sender: Any, alert: Alert, **kwargs: Any) -> None:
        heard.append((sender, alert))

    def broken(sender: Any, **kwargs: Any) -> None:
        raise RuntimeError("receiver bug")

    signals.alert.connect(broken)
    signals.alert.connect(listener)
    try:
        first, second = an_alert(), an_alert(rule="depth", subject="")
        dead = hook(f"http://127.0.0.1:{closed_port}/")
        with caplog.at_level(logging.ERROR, logger="deadletter"):
            send(first, ["mail_admins", hook(receiver.url), dead])
            send(second, [])
    finally:
        signals.alert.disconnect(broken)
        signals.alert.disconnect(listener)
    assert heard == [("deadletter", first), ("deadletter", second)]
    assert "signal receiver failed" in caplog.text and "receiver bug" in caplog.text
    # Django's own AdminEmailHandler mails the admins send_robust's error log too.
    assert [m.subject for m in mail.outbox].count(f"[Django] {first.title}") == 1
    assert len(receiver.got) == 1


def test_a_redelivery_does_not_send_the_signal_again(receiver: Receiver, settings: Any) -> None:
    configure(settings, hook(receiver.url))
    receiver.status = 500
    heard: list[Alert] = []

    def listener(sender: Any, alert: Alert, **kwargs: Any) -> None:
        heard.append(alert)

    signals.alert.connect(listener)
    try:
        send(an_alert(), [hook(receiver.url)])
        receiver.status = 200
        assert Drainer([QUEUE]).run().delivered == 1
    finally:
        signals.alert.disconnect(listener)
    assert heard == [an_alert()]


@pytest.mark.parametrize(
    "spec",
    [
        "sms",
        {"webhook": "https://h.example.com/"},
        {"webhook": "ftp://h.example.com/", "secret": SECRET},
        {"webhook": "http://[::1/", "secret": SECRET},
        {**hook("https://h.example.com/"), "token": "x"},
        {"url": "https://h.example.com/", "secret": b"not-a-str"},
    ],
)
def test_the_checks_and_the_sender_refuse_a_bad_spec_for_the_same_reasons(
    settings: Any, caplog: pytest.LogCaptureFixture, spec: Any
) -> None:
    settings.DEADLETTER_SITE_URL = "https://ops.example.com"
    configure(settings, spec)
    checked = [
        e.msg.removeprefix("DEADLETTER_ALERTS['channels'][0]").removesuffix(".")
        for e in check_settings()
        if e.id == "deadletter.E024"
    ]
    with caplog.at_level(logging.ERROR, logger="deadletter"):
        assert send(an_alert(), [spec]) == [channels.channel_name(spec)]
    sent = [r.getMessage().split(": channels[0]", 1)[1] for r in caplog.records]
    assert checked and sent == checked
    assert QueuedMessage.objects.of_queue(QUEUE).count() == 0


# --- the docs' receivers, run as written --------------------------------------------


def docs_block(containing: str) -> dict[str, Any]:
    text = (REPO / "docs" / "alert-channels.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", text, re.DOTALL) if containing in b]
    namespace: dict[str, Any] = {}
    exec(compile(block, "docs/alert-channels.md", "exec"), namespace)
    return namespace


def test_the_docs_receivers_take_what_the_webhook_sends_and_refuse_a_tampered_body(
    receiver: Receiver,
) -> None:
    receiver.secret = secret = "the webhook's secret in DEADLETTER_ALERTS"
    send(an_alert(), [hook(receiver.url, secret)])
    [got] = receiver.got
    headers = {"Deadletter-Timestamp": got.timestamp, "Deadletter-Signature": got.signature}
    alert_from = docs_block("def alert_from")["alert_from"]
    signed = docs_block("def signed")["signed"]
    assert alert_from(got.body, headers) == an_alert().as_json()
    assert signed(got.body, got.timestamp, got.signature, secret)
    tampered = got.body.replace(b"webhooks", b"payments")
    assert alert_from(tampered, headers) is None
    assert not signed(tampered, got.timestamp, got.signature, secret)
    assert alert_from(got.body, {}) is None


def test_the_api_refuses_a_message_carrying_the_parked_alerts_keys() -> None:
    client = APIClient()
    client.force_login(User.objects.create_superuser("root"))
    body = {"subject": "forged", "extra": {ALERT_KEY: {"title": "pay now"}}}
    response = client.post(f"/api/deadletter/queues/{QUEUE}/messages/", body, format="json")
    assert response.status_code == 400
    assert "reserved by deadletter.reports.alerts" in str(response.json()["extra"])
    assert QueuedMessage.objects.of_queue(QUEUE).count() == 0
