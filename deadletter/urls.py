"""URL pieces shared by the edges: the one text form of a key in a path, and
the app's own routes: `path("deadletter/", include("deadletter.urls"))` gives
the Prometheus endpoint the name `deadletter:metrics` (off unless
`DEADLETTER_METRICS_TOKEN` is set)."""

from __future__ import annotations

from django.urls import path

from deadletter.reports.metrics import metrics_view
from deadletter.wire import keys

app_name = "deadletter"


class KeyConverter:
    """`<dlkey:key>`: a row key as lowercase hex (`keys.to_text`), given to views as bytes."""

    regex = "[0-9a-f]{2,546}"

    def to_python(self, value: str) -> bytes:
        return keys.from_text(value)

    def to_url(self, value: bytes) -> str:
        return keys.to_text(value)


urlpatterns = [path("metrics", metrics_view, name="metrics")]
