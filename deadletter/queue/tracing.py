"""OpenTelemetry, when the `otel` extra is installed: the W3C trace context of the
span active at park time, kept in the message (`TRACEPARENT_KEY`), and a
`deadletter.deliver` span per attempt linked back to it. Without the package
nothing is imported again and nothing changes: `ENABLED` is False, a park
stores no key and an attempt opens no span; with the package but no tracer
provider set by the site (`spans_on()` False) an attempt opens none either.

It lives in `queue/` because both ends use it: the park (`queue.api`) and the
drain above it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from deadletter.queue import seals
from deadletter.wire.messages import Message

try:
    from opentelemetry import trace as _trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the otel extra is not installed: checked once, here
    _trace = None  # type: ignore[assignment]
    TraceContextTextMapPropagator = None  # type: ignore[assignment,misc]

__all__ = [
    "ENABLED",
    "SPAN_NAME",
    "TRACEPARENT_KEY",
    "Attempt",
    "attempt_span",
    "current_traceparent",
    "spans_on",
    "with_traceparent",
]

ENABLED = _trace is not None
TRACEPARENT_KEY = "Traceparent"
"""The extra key of the trace context captured at park time (W3C `traceparent` text)."""
SPAN_NAME = "deadletter.deliver"

seals.reserve("deadletter", (TRACEPARENT_KEY,))

_propagator = TraceContextTextMapPropagator() if ENABLED else None
_NO_PROVIDERS = (_trace.ProxyTracerProvider, _trace.NoOpTracerProvider) if ENABLED else ()
_tracer: tuple[Any, Any] = (None, None)
"""The provider the tracer was taken from, and the tracer."""


def spans_on() -> bool:
    """Whether an attempt opens a span: the package is there and the site set a
    tracer provider (until it does, the API's spans record nothing, and opening
    one per attempt would cost a drain for nothing)."""
    return _trace is not None and not isinstance(_trace.get_tracer_provider(), _NO_PROVIDERS)


def _tracer_of_now() -> Any:
    """The app's tracer from the current provider, taken again only when it changes."""
    global _tracer
    assert _trace is not None
    provider = _trace.get_tracer_provider()
    if _tracer[0] is not provider:
        _tracer = (provider, provider.get_tracer("deadletter"))
    return _tracer[1]


def current_traceparent() -> str | None:
    """The W3C `traceparent` of the span active now, or None (no package, no valid span)."""
    if _trace is None or _propagator is None:
        return None
    if not _trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return carrier.get("traceparent")


def with_traceparent(msg: Message) -> Message:
    """`msg` carrying the active span's trace context, for a park; `msg` itself when
    there is none or it already carries one (a message parked again keeps the
    trace of its first park)."""
    if _trace is None or TRACEPARENT_KEY in msg.extra:
        return msg
    traceparent = current_traceparent()
    if traceparent is None:
        return msg
    return msg.replace(extra={**msg.extra, TRACEPARENT_KEY: traceparent})


class Attempt:
    """The open span of one attempt; `outcome` names how it ended."""

    __slots__ = ("span",)

    def __init__(self, span: Any) -> None:
        self.span = span

    def outcome(self, outcome: str) -> None:
        self.span.set_attribute("deadletter.outcome", outcome)


@contextlib.contextmanager
def attempt_span(
    *, queue: str, key: str, attempt: int, traceparent: str | None, ran: float | None = None
) -> Iterator[Attempt]:
    """A CONSUMER span `deadletter.deliver`, current while the body runs, linked to
    the park's span when `traceparent` parses; `ran` (seconds) starts it that long
    ago (a handler that already ran in another thread). A raised error is recorded
    on the span and passes through. Call only when `spans_on()`."""
    assert _trace is not None and _propagator is not None
    links = []
    if isinstance(traceparent, str):
        parked = _trace.get_current_span(
            _propagator.extract({"traceparent": traceparent})
        ).get_span_context()
        if parked.is_valid:
            links.append(_trace.Link(parked))
    tracer = _tracer_of_now()
    start = None if ran is None else time.time_ns() - int(ran * 1e9)
    span = tracer.start_span(
        SPAN_NAME,
        kind=_trace.SpanKind.CONSUMER,
        links=links,
        start_time=start,
        attributes={
            "deadletter.queue": queue,
            "deadletter.key": key,
            "deadletter.attempt": attempt,
        },
    )
    with _trace.use_span(span, end_on_exit=True, record_exception=True):
        yield Attempt(span)
