"""The delivery context (`deadletter.drain.DeliveryContext`): a handler taking a
second argument is told the attempt's key, number, first failure, queue, deadline
and park-time trace context, on every path that calls a handler."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from deadletter import PermanentFailure, drain
from deadletter.checks import check_handlers
from deadletter.drain import DeliveryContext, DrainConfigError, Drainer, DrainOptions, redeliver
from deadletter.drain.redrive_run import run_redrive
from deadletter.drain.redrives import plan_redrive
from deadletter.queue import archive, store_failed_msgs
from deadletter.queue.moves import ORIGIN_KEY
from deadletter.wire.messages import Message
from tests.factories import parked, parked_messages

pytestmark = pytest.mark.django_db(transaction=True)

seen: list[DeliveryContext] = []
behaviour: dict[str, Any] = {}


def ctx_handler(msg: Message, ctx: DeliveryContext) -> None:
    seen.append(ctx)
    action = behaviour.get("raise")
    if action is not None:
        raise action


def three_required(msg: Message, ctx: DeliveryContext, other: object) -> None:
    raise AssertionError("never called")


def optional_second(msg: Message, ctx: DeliveryContext | None = None) -> None:
    seen.append(ctx)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def handlers(settings: Any) -> Iterator[None]:
    settings.DEADLETTER_HANDLERS = {
        "q": "tests.drain.test_delivery_context.ctx_handler",
        "other": "tests.drain.test_delivery_context.ctx_handler",
    }
    seen.clear()
    behaviour.clear()
    yield
    seen.clear()
    behaviour.clear()


def run(queue: str = "q", **options: Any) -> Any:
    return Drainer([queue], DrainOptions(ignore_backoff=True, **options)).run()


def park_one(queue: str = "q") -> tuple[bytes, datetime]:
    queued_at = datetime.now(UTC) - timedelta(hours=1)
    return store_failed_msgs(queue, Message(subject="a", queued_at=queued_at)), queued_at


def test_three_failing_drains_see_one_key_and_attempts_1_2_3() -> None:
    key, queued_at = park_one()
    behaviour["raise"] = RuntimeError("down")
    for _ in range(3):
        run()
    assert [ctx.attempt for ctx in seen] == [1, 2, 3]
    assert {ctx.key for ctx in seen} == {key.hex()}
    assert {ctx.queue for ctx in seen} == {"q"}
    assert {ctx.first_failure for ctx in seen} == {queued_at}
    assert seen[0].first_failure is not None and seen[0].first_failure.tzinfo is not None
    assert parked_messages()[0].extra["Attempts"] == 3


def test_no_time_limit_no_deadline_and_no_trace() -> None:
    park_one()
    run()
    (ctx,) = seen
    assert ctx.deadline is None
    assert ctx.traceparent is None
    assert parked() == []


def test_the_handler_timeout_sets_the_deadline(settings: Any) -> None:
    settings.DEADLETTER_HANDLER_TIMEOUT = 30
    park_one()
    before = datetime.now(UTC)
    run()
    after = datetime.now(UTC)
    (ctx,) = seen
    assert ctx.deadline is not None
    assert before + timedelta(seconds=30) <= ctx.deadline <= after + timedelta(seconds=30)


def test_a_drains_time_budget_sets_the_deadline() -> None:
    park_one()
    before = datetime.now(UTC)
    run(budget=60)
    after = datetime.now(UTC)
    (ctx,) = seen
    assert ctx.deadline is not None
    assert before < ctx.deadline <= after + timedelta(seconds=60)


def test_lanes_pass_the_context_too() -> None:
    keys = [park_one()[0] for _ in range(4)]
    run(concurrency=2)
    assert sorted(ctx.key for ctx in seen) == sorted(k.hex() for k in keys)
    assert {ctx.attempt for ctx in seen} == {1}


def test_an_operators_retry_passes_the_context() -> None:
    key, _ = park_one()
    behaviour["raise"] = RuntimeError("down")
    run()
    behaviour.clear()
    redeliver([key])
    assert [(ctx.key, ctx.attempt) for ctx in seen] == [(key.hex(), 1), (key.hex(), 2)]


def test_a_redrive_into_another_queue_keeps_the_key() -> None:
    key, _ = park_one()
    run_redrive(plan_redrive(queue="q", destination="other").pk)
    (moved,) = parked_messages("other")
    assert moved.extra[ORIGIN_KEY] == key.hex()
    run("other")
    (ctx,) = seen
    assert (ctx.key, ctx.queue) == (key.hex(), "other")


def test_a_second_move_keeps_the_first_key(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {
        **settings.DEADLETTER_HANDLERS,
        "third": "tests.drain.test_delivery_context.ctx_handler",
    }
    key, _ = park_one()
    run_redrive(plan_redrive(queue="q", destination="other").pk)
    run_redrive(plan_redrive(queue="other", destination="third").pk)
    run("third")
    (ctx,) = seen
    assert (ctx.key, ctx.queue) == (key.hex(), "third")


def test_a_restored_message_keeps_its_key() -> None:
    key, _ = park_one()
    behaviour["raise"] = PermanentFailure("bad")
    run()
    assert parked() == []
    assert archive.restore_msg(key) == key
    behaviour.clear()
    run()
    assert [ctx.key for ctx in seen] == [key.hex(), key.hex()]


def test_a_second_parameter_with_a_default_gets_the_context(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.drain.test_delivery_context.optional_second"}
    key, _ = park_one()
    run()
    (ctx,) = seen
    assert ctx.key == key.hex()


@pytest.mark.parametrize("reserved", [ORIGIN_KEY, "Traceparent"])
def test_the_api_refuses_a_message_carrying_an_origin_or_a_trace(reserved: str) -> None:
    client = APIClient()
    client.force_login(User.objects.create_superuser("root"))
    body = {"subject": "forged", "extra": {reserved: "710018ed7ad9445d2850385567bca3be5f10"}}
    response = client.post("/api/deadletter/queues/q/messages/", body, format="json")
    assert response.status_code == 400
    assert f"{reserved!r} reserved by deadletter" in str(response.json()["extra"])
    assert parked() == []


def test_check_reports_a_handler_with_three_required_parameters(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.drain.test_delivery_context.three_required"}
    (error,) = check_handlers()
    assert error.id == "deadletter.E029"
    assert "takes 3 required positional parameters" in error.msg
    with pytest.raises(DrainConfigError, match="3 required positional"):
        Drainer(["q"])


@pytest.mark.parametrize(
    ("handler", "form"),
    [
        (lambda msg: None, False),
        (lambda msg, ctx: None, True),
        (lambda msg, ctx=None: None, True),
        (lambda *args: None, False),
        (lambda: None, "takes no positional parameter"),
        (lambda msg, *, flag: None, "required keyword-only parameter 'flag'"),
        (print, False),
    ],
)
def test_the_form_a_handler_takes(handler: Any, form: bool | str) -> None:
    found = drain.handlers.takes_context(handler)
    assert found == form if isinstance(form, bool) else form in str(found)
