"""The `otel` extra (`deadletter.queue.tracing`): a park inside a span keeps its
trace context, and each delivery attempt is a `deadletter.deliver` span linked to
it, with the queue, key, attempt and outcome."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import cbor2
import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from deadletter.drain import DeliveryContext, Drainer, DrainOptions
from deadletter.queue import seals, store_failed_msgs, tracing
from deadletter.wire import codec
from deadletter.wire.messages import Message
from tests.factories import parked_messages, table_rows

pytestmark = pytest.mark.django_db(transaction=True)

EXPORTER = InMemorySpanExporter()
seen: list[DeliveryContext] = []
fail: list[bool] = []


def handler(msg: Message, ctx: DeliveryContext) -> None:
    seen.append(ctx)
    with trace.get_tracer("tests").start_as_current_span("handler's own"):
        if fail:
            raise RuntimeError("down")


@pytest.fixture(scope="module", autouse=True)
def provider() -> None:
    """One provider for the process (the API sets it once), exporting to memory."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        sdk = TracerProvider()
        sdk.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(sdk)


@pytest.fixture(autouse=True)
def handlers(settings: Any) -> Iterator[None]:
    settings.DEADLETTER_HANDLERS = {"q": "tests.drain.test_tracing.handler"}
    EXPORTER.clear()
    seen.clear()
    fail.clear()
    yield
    fail.clear()


def park_in_span() -> tuple[bytes, trace.SpanContext]:
    with trace.get_tracer("tests").start_as_current_span("sending") as span:
        key = store_failed_msgs(
            "q", Message(subject="a", queued_at=datetime.now(UTC) - timedelta(minutes=1))
        )
    return key, span.get_span_context()


def deliveries() -> list[ReadableSpan]:
    return [s for s in EXPORTER.get_finished_spans() if s.name == tracing.SPAN_NAME]


def drain() -> None:
    Drainer(["q"], DrainOptions(ignore_backoff=True)).run()


def test_a_park_inside_a_span_stores_its_traceparent() -> None:
    _, parked_in = park_in_span()
    (msg,) = parked_messages()
    assert msg.extra[tracing.TRACEPARENT_KEY] == (
        f"00-{parked_in.trace_id:032x}-{parked_in.span_id:016x}-{parked_in.trace_flags:02x}"
    )


def test_the_traceparent_is_a_text_key_after_gos_fields_and_round_trips() -> None:
    park_in_span()
    ((_, value),) = table_rows()
    (wire,) = cbor2.loads(value)
    assert list(wire)[-1] == tracing.TRACEPARENT_KEY
    assert isinstance(wire[tracing.TRACEPARENT_KEY], str)
    assert codec.encode_one(codec.decode_single(value)) == value  # type: ignore[arg-type]


def test_a_park_outside_any_span_stores_nothing() -> None:
    store_failed_msgs("q", Message(subject="a"))
    (msg,) = parked_messages()
    assert tracing.TRACEPARENT_KEY not in msg.extra
    drain()
    (span,) = deliveries()
    assert span.links == ()
    assert seen[0].traceparent is None


def test_the_redelivery_span_is_linked_to_the_parks_span() -> None:
    key, parked_in = park_in_span()
    drain()
    (span,) = deliveries()
    assert span.kind is trace.SpanKind.CONSUMER
    (link,) = span.links
    assert (link.context.trace_id, link.context.span_id) == (parked_in.trace_id, parked_in.span_id)
    assert span.context.trace_id != parked_in.trace_id
    assert dict(span.attributes or {}) == {
        "deadletter.queue": "q",
        "deadletter.key": key.hex(),
        "deadletter.attempt": 1,
        "deadletter.outcome": "delivered",
    }


def test_the_handler_is_told_the_parks_traceparent() -> None:
    park_in_span()
    (msg,) = parked_messages()
    drain()
    assert seen[0].traceparent == msg.extra[tracing.TRACEPARENT_KEY]


def test_each_failed_attempt_is_a_span_with_its_number_and_outcome() -> None:
    park_in_span()
    fail.append(True)
    drain()
    drain()
    spans = deliveries()
    assert [(s.attributes or {})["deadletter.attempt"] for s in spans] == [1, 2]
    assert {(s.attributes or {})["deadletter.outcome"] for s in spans} == {"failed"}


def test_the_handlers_own_spans_are_children_of_the_attempt(settings: Any) -> None:
    park_in_span()
    park_in_span()
    drain()
    settings.DEADLETTER_HANDLER_TIMEOUT = 30  # the handler runs in a thread of its own
    park_in_span()
    drain()
    spans = EXPORTER.get_finished_spans()
    own = [s for s in spans if s.name == "handler's own"]
    assert len(own) == 3
    attempts = {s.context.span_id for s in deliveries()}
    assert {s.parent.span_id for s in own if s.parent is not None} == attempts


def test_the_api_refuses_the_key_from_outside() -> None:
    with pytest.raises(seals.ReservedKey, match="Traceparent"):
        seals.refuse_reserved([tracing.TRACEPARENT_KEY])
