"""Dead letters for Celery, in process: a task run eagerly (`apply`) goes through
the same tracer and signals as in a worker, so what the capture parks, skips and
redrives is tested here without a broker; the broker and worker tests are in
test_contrib_celery_broker.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from django.contrib.auth.models import Permission, User
from django.core.checks import run_checks

from deadletter import NeedsOperator, drain
from deadletter.contrib.celery import capture, redrive, redriving
from deadletter.drain.outcomes import is_held
from deadletter.queue import fetch_failed_msgs, seals, store_failed_msgs
from deadletter.queue.settlements import rewrite_msg
from deadletter.wire.messages import Message
from tests.contrib import celery_jobs

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "celery.celery"


@pytest.fixture
def record(tmp_path: Path) -> str:
    return str(tmp_path / "record.txt")


def runs(record: str) -> list[str]:
    path = Path(record)
    return path.read_text().splitlines() if path.exists() else []


def parked(name: str = QUEUE) -> list[Message]:
    return [item.msg for item in fetch_failed_msgs(name)]


def test_a_task_that_fails_for_good_is_parked_once_after_its_last_retry(
    record: str, tmp_path: Path
) -> None:
    result = celery_jobs.flaky.apply(args=(str(tmp_path / "fixed"), record), kwargs={"label": "a"})
    assert result.failed()
    assert runs(record) == [
        "a retries=0 original=None",
        "a retries=1 original=None",
        "a retries=2 original=None",
    ]
    (msg,) = parked()
    extra = msg.extra
    assert msg.subject == "tests.contrib.celery_jobs.flaky"
    assert extra[capture.TASK] == "tests.contrib.celery_jobs.flaky"
    assert extra[capture.TASK_ID] == result.id
    assert extra[capture.TASK_ARGS] == [str(tmp_path / "fixed"), record]
    assert extra[capture.TASK_KWARGS] == {"label": "a"}
    assert (extra[capture.TASK_QUEUE], extra[capture.TASK_RETRIES]) == ("celery", 2)
    assert extra["LastError"] == "ConnectionError: endpoint down for a"
    assert extra[capture.TASK_EXCEPTION] == "builtins.ConnectionError"
    assert "endpoint down for a" in extra[capture.TASK_TRACEBACK]
    assert len(extra[capture.TASK_TRACEBACK].encode()) <= capture.TRACEBACK_BYTES
    assert msg.queued_at is not None
    capture.SEAL.check(extra)


def test_a_task_that_succeeds_or_is_retried_into_success_parks_nothing(record: str) -> None:
    assert celery_jobs.succeeds.apply(args=(record,)).successful()
    assert celery_jobs.retried_then_succeeds.apply(args=(record,)).successful()
    assert runs(record) == ["ok", "retries=0", "retries=1"]
    assert parked() == []


def test_a_task_opts_out_with_its_own_option() -> None:
    assert celery_jobs.opted_out.apply().failed()
    assert parked() == []


def test_a_setting_lists_task_names_that_are_never_parked(settings: Any) -> None:
    settings.DEADLETTER_CELERY_EXCLUDE = ["tests.contrib.celery_jobs.raises"]
    celery_jobs.raises.apply(args=("value",))
    assert parked() == []


def test_a_setting_parks_only_the_exception_types_it_lists(settings: Any) -> None:
    settings.DEADLETTER_CELERY_EXCEPTIONS = ["builtins.KeyError", "builtins.TypeError"]
    for kind in ("value", "key", "type"):
        celery_jobs.raises.apply(args=(kind,))
    assert [m.extra["LastError"] for m in parked()] == [
        "KeyError: 'a key error'",
        "TypeError: a type error",
    ]


def test_the_settings_are_checked(settings: Any) -> None:
    settings.DEADLETTER_CELERY_EXCLUDE = "tests.contrib.celery_jobs.raises"
    settings.DEADLETTER_CELERY_EXCEPTIONS = ["builtins.KeyError", "no.such.Error", "os.path"]
    found = {
        (m.id, m.msg.split(",")[0]) for m in run_checks() if m.id.startswith("deadletter_celery")
    }
    assert {i for i, _ in found} == {"deadletter_celery.E001", "deadletter_celery.E002"}
    assert len([i for i, _ in found if i.endswith("E002")]) == 2


def test_arguments_the_queue_cannot_hold_are_recorded_and_the_message_never_sent() -> None:
    celery_jobs.takes_an_object.apply(args=(object(),))
    (msg,) = parked()
    assert capture.TASK_ARGS not in msg.extra
    assert "not storable" in msg.extra[capture.TASK_ARGS_CUT]["Why"]
    with pytest.raises(NeedsOperator, match="not kept at park time"):
        redrive(msg)


def test_parking_never_raises_into_the_worker(unreachable_db: Any, caplog: Any) -> None:
    result = celery_jobs.raises.apply(args=("value",))
    assert result.failed()  # the task's own failure, not the capture's
    assert "could not park failed Celery task" in caplog.text


def test_every_key_a_parked_task_carries_is_reserved_by_the_celery_integration(
    record: str, tmp_path: Path
) -> None:
    celery_jobs.flaky.apply(args=(str(tmp_path / "fixed"), record))
    (msg,) = parked()
    own = set(msg.extra) - {"LastError"}
    assert own <= {k for k, owner in seals.reserved().items() if owner == capture.APP}


def test_a_task_forged_through_the_rest_api_is_refused_and_never_sent(
    record: str, client: Any
) -> None:
    user = User.objects.create_user("service")
    user.user_permissions.add(Permission.objects.get(codename="add_queuedmessage"))
    client.force_login(user)
    response = client.post(
        f"/deadletter/api/queues/{QUEUE}/messages/",
        {
            "subject": "hi",
            capture.TASK: "tests.contrib.celery_jobs.succeeds",
            capture.TASK_ARGS: [record],
        },
        content_type="application/json",
    )
    assert response.status_code == 400
    assert "deadletter.contrib.celery" in response.content.decode()
    assert parked() == [] and runs(record) == []


def test_the_admin_and_the_api_show_a_parked_task_with_its_arguments(
    record: str, tmp_path: Path, admin_client: Any
) -> None:
    celery_jobs.flaky.apply(args=(str(tmp_path / "fixed"), record), kwargs={"label": "b"})
    body = admin_client.get(f"/deadletter/api/queues/{QUEUE}/messages/").json()
    [row] = body["results"]
    [msg] = row["messages"]
    assert msg["subject"] == "tests.contrib.celery_jobs.flaky"
    assert msg["extra"][capture.TASK_KWARGS] == {"label": "b"}
    page = admin_client.get("/admin/deadletter/queuedmessage/", {"queue": QUEUE}).content.decode()
    assert "tests.contrib.celery_jobs.flaky" in page and "ConnectionError" in page


def test_a_forged_message_is_refused_and_nothing_is_sent(record: str) -> None:
    forged = Message(
        subject="x",
        extra={
            capture.TASK: "tests.contrib.celery_jobs.succeeds",
            capture.TASK_ARGS: [record],
            capture.TASK_SEAL: "0" * 64,
        },
    )
    store_failed_msgs(QUEUE, forged)
    (msg,) = parked()
    with pytest.raises(NeedsOperator, match="refused to redrive, nothing sent"):
        redrive(msg)
    assert runs(record) == []


def test_a_task_this_process_does_not_register_is_kept_for_an_operator_never_dropped(
    record: str, tmp_path: Path, settings: Any
) -> None:
    settings.DEADLETTER_MAX_ATTEMPTS = 1
    celery_jobs.flaky.apply(args=(str(tmp_path / "fixed"), record))
    [item] = fetch_failed_msgs(QUEUE)
    extra = capture.SEAL.sealed({**item.msg.extra, capture.TASK: "tests.contrib.celery_jobs.gone"})
    rewrite_msg(item.key, item.msg.replace(extra=extra))

    report = drain.redeliver([item.key])

    assert (report.held, report.dropped["permanent"], report.dropped["max_attempts"]) == (1, 0, 0)
    [kept] = fetch_failed_msgs(QUEUE)
    assert kept.key == item.key and is_held(kept.last_error)
    assert "tests.contrib.celery_jobs.gone is not registered" in str(kept.last_error)


def test_a_task_sealed_under_a_secret_key_rotated_out_is_kept_saying_why(
    record: str, tmp_path: Path, settings: Any
) -> None:
    settings.SECRET_KEY = "the-key-it-was-parked-under"
    celery_jobs.flaky.apply(args=(str(tmp_path / "fixed"), record))
    [item] = fetch_failed_msgs(QUEUE)
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = "the-key-in-use-now", []

    report = drain.redeliver([item.key])

    assert (report.held, report.dropped["permanent"]) == (1, 0)
    [kept] = fetch_failed_msgs(QUEUE)
    assert (kept.key, kept.attempts) == (item.key, item.attempts)
    assert is_held(kept.last_error) and "SECRET_KEY_FALLBACKS" in str(kept.last_error)


def test_retry_now_in_the_admin_keeps_a_task_it_cannot_redrive_and_shows_why(
    record: str, tmp_path: Path, settings: Any, client: Any, admin_user: Any
) -> None:
    settings.SECRET_KEY = "the-key-it-was-parked-under"
    celery_jobs.flaky.apply(args=(str(tmp_path / "fixed"), record))
    [item] = fetch_failed_msgs(QUEUE)
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = "the-key-in-use-now", []
    admin_client = client
    admin_client.force_login(admin_user)  # a session of the key in use now
    page = f"/admin/deadletter/queuedmessage/{item.key.hex()}/change/"

    retried = admin_client.post(
        f"/admin/deadletter/queuedmessage/{item.key.hex()}/retry/", follow=True
    )

    assert retried.redirect_chain[-1][0].endswith(page)
    text = retried.content.decode()
    assert "1 kept for an operator" in text and "needs an operator" in text
    assert "SECRET_KEY_FALLBACKS" in text
    listing = admin_client.get("/admin/deadletter/queuedmessage/", {"queue": QUEUE})
    assert "needs an operator" in listing.content.decode()
    assert [i.key for i in fetch_failed_msgs(QUEUE)] == [item.key]


def test_the_task_modules_are_loaded_as_a_worker_loads_them_before_a_lookup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, "tests.contrib.celery_discovered.tasks", raising=False)
    app = Celery("discovering", set_as_current=False)
    app.autodiscover_tasks(["tests.contrib.celery_discovered"])
    name = "tests.contrib.celery_discovered.tasks.found_by_autodiscovery"
    before = name in app.tasks

    problem = redriving.load_task_modules(app)

    assert (before, problem, name in app.tasks) == (False, None, True)


def test_the_api_s_drain_keeps_a_task_it_cannot_redrive(
    record: str, tmp_path: Path, settings: Any, client: Any, admin_user: Any
) -> None:
    settings.SECRET_KEY = "the-key-it-was-parked-under"
    celery_jobs.flaky.apply(args=(str(tmp_path / "fixed"), record))
    [item] = fetch_failed_msgs(QUEUE)
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = "the-key-in-use-now", []
    client.force_login(admin_user)

    response = client.post(
        f"/deadletter/api/queues/{QUEUE}/drain/",
        {"ignore_backoff": True},
        content_type="application/json",
    )

    assert response.status_code == 200
    assert response.json()["dropped"]["permanent"] == 0
    [kept] = fetch_failed_msgs(QUEUE)
    assert kept.key == item.key and is_held(kept.last_error)
