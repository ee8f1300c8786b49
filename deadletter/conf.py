"""Every `DEADLETTER_*` setting, read live so `override_settings` just works."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS

DEFAULT_MAX_QUEUE_AGE = timedelta(days=30)


class Settings:
    @property
    def MAX_QUEUE_AGE(self) -> timedelta:
        """How long a message is retried before fetch drops it (from its `queued_at`)."""
        return getattr(settings, "DEADLETTER_MAX_QUEUE_AGE", DEFAULT_MAX_QUEUE_AGE)

    @property
    def DATABASE(self) -> str:
        """The database alias the queue table lives in."""
        return getattr(settings, "DEADLETTER_DATABASE", DEFAULT_DB_ALIAS)

    @property
    def HANDLERS(self) -> dict[str, Any]:
        """Queue name -> dotted path of the callable that redelivers its messages."""
        return getattr(settings, "DEADLETTER_HANDLERS", {})

    @property
    def MAX_ATTEMPTS(self) -> int | None:
        """Drop a message after this many failed attempts; None retries until the age limit."""
        return getattr(settings, "DEADLETTER_MAX_ATTEMPTS", None)


conf = Settings()
