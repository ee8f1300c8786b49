"""Every `DEADLETTER_*` setting, read once and read again when Django says it changed.

The store path asks for the queue's database alias on every call, so values
are cached, as django-debug-toolbar caches its config: until Django's
`setting_changed` signal names the setting, which `override_settings` and
pytest-django's `settings` fixture send for every setting they set. Deleting
a setting sends no signal in Django; a test that deletes one sends
`setting_changed` itself (or sets the default instead).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.db import DEFAULT_DB_ALIAS

DEFAULT_MAX_QUEUE_AGE = timedelta(days=30)
DEFAULT_ARCHIVE_FOR = timedelta(days=30)
DEFAULT_ALERT_DIGEST = timedelta(minutes=10)
# The keys of DEADLETTER_ALERTS and of a queue's "alerts" policy: the rules, then
# where their alerts go.
ALERT_RULES = (
    "new_cause",
    "reopened_cause",
    "depth",
    "oldest_age",
    "expiring",
    "breaker",
    "stalled",
)
ALERT_KEYS = (*ALERT_RULES, "channels")
# Scope -> DRF rate; a project's DEADLETTER_API_THROTTLE_RATES updates these.
DEFAULT_API_THROTTLE_RATES: dict[str, str | None] = {"failed_auth": "30/min", "user": None}

_DEFAULTS: dict[str, Any] = {
    "MAX_QUEUE_AGE": DEFAULT_MAX_QUEUE_AGE,
    "ARCHIVE_FOR": DEFAULT_ARCHIVE_FOR,
    "DATABASE": DEFAULT_DB_ALIAS,
    "HANDLERS": {},
    "MAX_ATTEMPTS": None,
    "BACKOFF": None,
    "BREAKER": None,
    "MAX_KILLS": 3,
    "MAX_ROW_BYTES": 4 * 2**20,
    "ADMIN_TIME_BUDGET": 5.0,
    "API_TIME_BUDGET": 25.0,
    "DATABASE_OUTAGE_LIMIT": timedelta(minutes=5),
    "HANDLER_TIMEOUT": None,
    "EXPIRY_WARNING": None,
    "METRICS_TOKEN": None,
    "API_THROTTLE_RATES": DEFAULT_API_THROTTLE_RATES,
    "MAX_MESSAGE_BYTES": 2**20,
    "CAPTURE_TASKS": False,
    "EVENT_CODES": {},
    "CELERY_EXCLUDE": (),
    "CELERY_EXCEPTIONS": None,
    "API_QUEUES": None,
    "ALERTS": {},
    "SITE_URL": None,
    "ALERT_DIGEST": DEFAULT_ALERT_DIGEST,
    "REDACT": None,
}
_PREFIX = "DEADLETTER_"
_cache: dict[str, Any] = {}


def _read(name: str) -> Any:
    try:
        return _cache[name]
    except KeyError:
        value = _cache[name] = getattr(settings, _PREFIX + name, _DEFAULTS[name])
        return value


def _forget(*, setting: str, **kwargs: Any) -> None:
    if setting.startswith(_PREFIX):
        _cache.pop(setting.removeprefix(_PREFIX), None)


setting_changed.connect(_forget, dispatch_uid="deadletter.conf")


class Settings:
    def raw(self, name: str) -> Any:
        """`DEADLETTER_<name>` as the project wrote it (its default when unset), for
        the checks, which say what is wrong with a value the properties would refuse."""
        return _read(name)

    @property
    def MAX_QUEUE_AGE(self) -> timedelta:
        """How long a message is retried before fetch drops it (from its `queued_at`)."""
        return _read("MAX_QUEUE_AGE")

    @property
    def ARCHIVE_FOR(self) -> timedelta | None:
        """How long the archive keeps what left a queue other than by delivery, for
        queues whose policy says nothing; None: for ever; `timedelta(0)`: no archive."""
        return _read("ARCHIVE_FOR")

    @property
    def DATABASE(self) -> str:
        """The database alias the queue table lives in."""
        return _read("DATABASE")

    @property
    def HANDLERS(self) -> dict[str, Any]:
        """Queue name -> dotted path of the callable that redelivers its messages, or
        a dict of that path (`"handler"`) and the queue's limits; read by
        `queue.config` alone, which everything else asks."""
        return _read("HANDLERS")

    @property
    def MAX_ATTEMPTS(self) -> int | None:
        """Drop a message after this many failed attempts; None retries until the age limit."""
        return _read("MAX_ATTEMPTS")

    @property
    def BACKOFF(self) -> list[float] | tuple[float, float] | None:
        """`[first_seconds, max_seconds]`: how long a message waits after a failed
        attempt (doubling each time), for queues whose policy says nothing; None: no wait."""
        return _read("BACKOFF")

    @property
    def BREAKER(self) -> int | None:
        """Failed attempts in a row that stop a queue for the rest of a pass, for
        queues whose policy says nothing; None: never stop."""
        return _read("BREAKER")

    @property
    def MAX_KILLS(self) -> int:
        """A message whose handler has killed its process (SIGKILL, out of memory) this
        many times is set aside, archived as `killed`, so the queue goes on."""
        return _read("MAX_KILLS")

    @property
    def MAX_ROW_BYTES(self) -> int:
        """A message row larger than this is never decoded: fetch and the drain leave
        it for an operator, the admin and the API show it as too large."""
        return int(_read("MAX_ROW_BYTES"))

    @property
    def ADMIN_TIME_BUDGET(self) -> float:
        """Seconds an admin request may spend on bulk work (retry, delete, drain,
        purge) before it stops and says how much is left."""
        return float(_read("ADMIN_TIME_BUDGET"))

    @property
    def API_TIME_BUDGET(self) -> float:
        """Seconds an API drain may take: it stops handing messages over then, and a
        handler still running is given up on (under a proxy's usual 30 s)."""
        return float(_read("API_TIME_BUDGET"))

    @property
    def DATABASE_OUTAGE_LIMIT(self) -> float:
        """Seconds a drain service (`deadletter_drain --forever`) goes on failing to
        reach the queue's database before it exits non-zero, so that its supervisor
        restarts it and an operator hears of it; set as a `timedelta` or seconds."""
        value = _read("DATABASE_OUTAGE_LIMIT")
        return value.total_seconds() if isinstance(value, timedelta) else float(value)

    @property
    def HANDLER_TIMEOUT(self) -> float | None:
        """Seconds a handler may run before the drain gives up on it (a failed
        attempt) and settles its row; None: no limit, the handler runs inline.
        Drains from the web also stop it at what is left of their budget."""
        return _read("HANDLER_TIMEOUT")

    @property
    def EXPIRY_WARNING(self) -> timedelta | None:
        """Warn (log and `message_expiring`) once per message this long before the
        age limit drops it; None: no warnings."""
        return _read("EXPIRY_WARNING")

    @property
    def EVENT_CODES(self) -> dict[int, str]:
        """Event code -> the name the admin and the API show for it; a code not
        named shows as its number (`deadletter.wire.messages.GO_EVENT_CODES` is the
        Go program's own names, a preset to opt into)."""
        return _read("EVENT_CODES")

    @property
    def CELERY_EXCLUDE(self) -> list[str] | tuple[str, ...]:
        """Celery task names that are never parked when they fail for good."""
        return _read("CELERY_EXCLUDE")

    @property
    def CELERY_EXCEPTIONS(self) -> list[str] | tuple[str, ...] | None:
        """Dotted paths of exception classes: a failed Celery task is parked only
        when its exception is one of them; None parks every failure."""
        return _read("CELERY_EXCEPTIONS")

    @property
    def METRICS_TOKEN(self) -> str | None:
        """The bearer token the Prometheus endpoint asks for; unset: the endpoint is off."""
        return _read("METRICS_TOKEN") or None

    @property
    def MAX_MESSAGE_BYTES(self) -> int:
        """The largest body the REST API takes to park (a 400 beyond it)."""
        return int(_read("MAX_MESSAGE_BYTES"))

    @property
    def API_QUEUES(self) -> tuple[str, ...] | None:
        """Shell-style patterns (`fnmatch`) of the queue names the REST API may park
        into; None: any name."""
        patterns = _read("API_QUEUES")
        return None if patterns is None else tuple(patterns)

    @property
    def CAPTURE_TASKS(self) -> bool:
        """Park failed Django Tasks without `deadletter.contrib.tasks` in INSTALLED_APPS."""
        return bool(_read("CAPTURE_TASKS"))

    @property
    def API_THROTTLE_RATES(self) -> dict[str, str | None]:
        """The API's throttle rates, DRF's "30/min" form or None (off): `failed_auth`
        per client address and per credential, `user` per user; scopes a project
        leaves out keep their default."""
        rates = _read("API_THROTTLE_RATES")
        return {**DEFAULT_API_THROTTLE_RATES, **rates} if isinstance(rates, dict) else rates

    @property
    def ALERTS(self) -> dict[str, Any]:
        """The alert rules for every queue (`reports.alerts.rules`): new_cause,
        reopened_cause, depth, oldest_age, expiring, breaker, stalled, channels; a
        queue's `alerts` dict in `DEADLETTER_HANDLERS` overrides them key by key."""
        return _read("ALERTS")

    @property
    def SITE_URL(self) -> str | None:
        """The site's absolute base URL ("https://ops.example.com"), which an alert's
        link to the admin is joined to; needed once any alert rule is on."""
        return _read("SITE_URL")

    @property
    def ALERT_DIGEST(self) -> timedelta:
        """The least time between two digests: when many alerts fire at once they go
        out as one digest, and then at most one digest per this interval."""
        return _read("ALERT_DIGEST")

    @property
    def REDACT(self) -> Any:
        """What is masked for users without `view_unredacted_queuedmessage`: a dict of
        queue pattern (`fnmatch`) -> names (`subject`, `fields[0]`, `card_number`,
        `CeleryKwargs.email`), or a callable `(queue, msg) -> names` or its dotted
        path; None: nothing (`queue.redaction`)."""
        return _read("REDACT")


conf = Settings()
