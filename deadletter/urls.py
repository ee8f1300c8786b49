"""The app's own routes: `path("deadletter/", include("deadletter.urls"))` gives
the Prometheus endpoint the name `deadletter:metrics` (off unless
`DEADLETTER_METRICS_TOKEN` is set)."""

from __future__ import annotations

from django.urls import path

from deadletter.reports.metrics import metrics_view

app_name = "deadletter"

urlpatterns = [path("metrics", metrics_view, name="metrics")]
