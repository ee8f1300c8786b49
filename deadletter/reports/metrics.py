"""The Prometheus text endpoint: `stats.collect` through a `prometheus_client` collector.

Off (404) unless `DEADLETTER_METRICS_TOKEN` is set; then a request must carry
`Authorization: Bearer <token>` (compared in constant time) or gets a 401.
`prometheus_client` is the optional `prometheus` extra: the view answers 501
naming it when it is missing. Mount `deadletter.urls`; its name is
`deadletter:metrics`.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterator
from typing import Any

from django.db import DatabaseError
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from deadletter.conf import conf
from deadletter.reports import expiry, stats

__all__ = ["METRICS_QUEUES", "StatsCollector", "metrics_view", "render"]

logger = logging.getLogger("deadletter")

# Queues a scrape labels besides those of DEADLETTER_HANDLERS (the first, by name);
# the rest are summed into one series, so a scrape costs the same at any number of queues.
METRICS_QUEUES = 100


class StatsCollector:
    """A custom collector over one `stats.Stats`: every figure as a metric family,
    `queue` as a label. Empty queues report ages of 0 (no message is waiting).
    The queues past the cap are one series of depth, waiting and drops with an
    empty `queue` label, so a sum over `queue` stays exact."""

    def __init__(self, figures: stats.Stats) -> None:
        self.figures = figures

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeHistogramMetricFamily,
            GaugeMetricFamily,
        )

        queues = self.figures.queues
        depth = GaugeMetricFamily(
            "deadletter_queue_depth", "Messages parked in the queue.", labels=["queue"]
        )
        age = GaugeMetricFamily(
            "deadletter_oldest_message_age_seconds",
            "Seconds since the oldest message of the queue was parked (its key time).",
            labels=["queue"],
        )
        failure = GaugeMetricFamily(
            "deadletter_oldest_failure_age_seconds",
            "Seconds since the head message of the queue first failed (QueuedAt).",
            labels=["queue"],
        )
        expiring = GaugeMetricFamily(
            "deadletter_expiring_messages",
            "Messages the age limit drops within deadletter_expiry_horizon_seconds.",
            labels=["queue"],
        )
        dropped = CounterMetricFamily(
            "deadletter_dropped",
            "Messages thrown away, by reason (expired, corrupt, permanent, max_attempts).",
            labels=["queue", "reason"],
        )
        waiting = GaugeMetricFamily(
            "deadletter_waiting_messages",
            "Messages a backoff holds back: the drain hands them over once it ends.",
            labels=["queue"],
        )
        paused = GaugeMetricFamily(
            "deadletter_queue_paused",
            "1 when the last drain pass stopped the queue after its breaker's failures in a row.",
            labels=["queue"],
        )
        attempts = GaugeHistogramMetricFamily(
            "deadletter_message_attempts",
            "Failed deliveries per message, over the oldest rows read (attempts_rows).",
            labels=["queue"],
        )
        for q in queues:
            depth.add_metric([q.name], q.depth)
            age.add_metric([q.name], q.oldest_enqueued_age or 0.0)
            failure.add_metric([q.name], q.oldest_failure_age or 0.0)
            expiring.add_metric([q.name], q.expiring)
            waiting.add_metric([q.name], q.waiting)
            paused.add_metric([q.name], 1 if q.paused else 0)
            for reason, count in q.dropped.items():
                dropped.add_metric([q.name, reason], count)
            attempts.add_metric([q.name], _buckets(q), gsum_value=_attempts_sum(q))
        others = self.figures.others
        if others is not None:
            # `queue=""` (no queue can have an empty name): every queue past the cap, summed.
            depth.add_metric([""], others.depth)
            waiting.add_metric([""], others.waiting)
            for reason, count in others.dropped.items():
                dropped.add_metric(["", reason], count)
        horizon = GaugeMetricFamily(
            "deadletter_expiry_horizon_seconds",
            "The horizon deadletter_expiring_messages looks ahead.",
            value=self.figures.horizon.total_seconds(),
        )
        yield from (depth, age, failure, expiring, waiting, paused, horizon, dropped, attempts)


def _buckets(q: stats.QueueStats) -> list[tuple[str, float]]:
    """Cumulative `le` buckets of the attempts histogram, ending in +Inf."""
    from prometheus_client.utils import floatToGoString

    counts = list(q.attempts.values())
    bounds = [floatToGoString(b) for b in stats.ATTEMPT_BUCKETS] + ["+Inf"]
    total, result = 0, []
    for bound, count in zip(bounds, counts, strict=True):
        total += count
        result.append((bound, float(total)))
    return result


def _attempts_sum(q: stats.QueueStats) -> float:
    """The histogram's sum, by each bucket's upper bound (the open bucket by its lower):
    the buckets are all the scan keeps."""
    lows = [0, *(b + 1 for b in stats.ATTEMPT_BUCKETS)]
    highs = [*stats.ATTEMPT_BUCKETS, lows[-1]]
    return float(sum(h * n for h, n in zip(highs, q.attempts.values(), strict=True)))


def render(figures: stats.Stats) -> bytes:
    """The Prometheus text exposition of `figures`; `ImportError` without prometheus_client."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatsCollector(figures))
    return generate_latest(registry)


@never_cache
@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    token = conf.METRICS_TOKEN
    if not token:
        raise Http404("metrics are off: DEADLETTER_METRICS_TOKEN is not set")
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        given.strip().encode("utf-8"), token.encode("utf-8")
    ):
        response = HttpResponse("a valid bearer token is required\n", status=401)
        response["WWW-Authenticate"] = 'Bearer realm="deadletter metrics"'
        return response
    try:
        from prometheus_client import CONTENT_TYPE_LATEST
    except ImportError:
        return HttpResponse(
            "prometheus_client is not installed: pip install 'django-deadletter[prometheus]'\n",
            status=501,
        )
    try:
        expiry.warn_expiring()
        body = render(stats.collect(limit=METRICS_QUEUES))
    except DatabaseError:
        logger.exception("metrics could not read the queue")
        return HttpResponse("the queue database cannot be read\n", status=503)
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
