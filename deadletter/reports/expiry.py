"""Expiry is never silent: warn once per message before the age limit drops it.

With `DEADLETTER_EXPIRY_WARNING` set, `warn_expiring` finds the messages that
will be dropped within that horizon (the head scan of `stats.expiring_rows`),
logs a warning and sends `message_expiring` for each one not warned about
before. The warned keys are kept in `counters.ExpiryWarning`, inserted with ON
CONFLICT DO NOTHING, so two runs at once still warn once; keys whose rows are
gone are forgotten on the next run. `deadletter_stats` and the metrics
endpoint call it, so a cron job or a Prometheus scrape is enough.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from django.db import transaction

from deadletter import signals
from deadletter.conf import conf
from deadletter.queue import limits
from deadletter.reports.stats import expiring_rows
from deadletter.store import scans, sql
from deadletter.store.counters import WARNING_TABLE
from deadletter.wire import gotime, keys

__all__ = ["warn_expiring"]

logger = logging.getLogger("deadletter")


def warn_expiring(queues: Iterable[str] | None = None, *, now_ns: int | None = None) -> int:
    """Warn about every message of `queues` (all when None) that its queue's age limit will
    drop within `DEADLETTER_EXPIRY_WARNING` and was not warned about before;
    returns how many were warned now (0 when the setting is unset)."""
    horizon = conf.EXPIRY_WARNING
    if horizon is None:
        return 0
    now = time.time_ns() if now_ns is None else now_ns

    def threshold_of(name: str) -> int:
        """Before this, a first failure of `name` expires within the horizon."""
        return now - gotime.duration_ns(limits.max_age(name)) + gotime.duration_ns(horizon)

    connection = sql.connection()
    if queues is None:
        heads = scans.queue_heads(connection)
        names = [
            keys.queue_of(head)
            for head in heads
            if _may_expire(head, threshold_of(keys.queue_of(head)))
        ]
    else:
        names = list(queues)
    warned_at = gotime.utc_datetime(now)
    warned = 0
    _forget_gone(connection)
    for name in names:
        max_age = limits.max_age(name)
        for key, msg in expiring_rows(connection, name, threshold_of(name)):
            if msg is None or msg.queued_at is None:
                continue
            with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
                if not sql.insert_new(
                    connection, cursor, WARNING_TABLE, ("key", "warned_at"), [(key, warned_at)]
                ):
                    continue
                expires_at = gotime.utc_datetime(
                    gotime.epoch_ns(msg.queued_at) + gotime.duration_ns(max_age)
                )
                logger.warning(
                    "message about to expire queue=%s key=%s queued_at=%s expires_at=%s",
                    name,
                    keys.to_text(key),
                    msg.queued_at.format(),
                    expires_at.isoformat(),
                )
                sql.after_commit(
                    connection,
                    signals.message_expiring,
                    sender=name,
                    key=key,
                    msg=msg,
                    expires_at=expires_at,
                )
                warned += 1
    return warned


def _may_expire(head: bytes, threshold_ns: int) -> bool:
    """Whether a queue whose lowest key is `head` can hold a row `expiring_rows` finds:
    its rows are in key-time order, so only a head parked before the threshold can
    (a legacy head tells nothing and is read). One head per queue, so however many
    queues there are, only those with a message this old are read further."""
    if keys.is_legacy_key(head):
        return True
    try:
        return keys.parse_key(head).time_ns < threshold_ns
    except ValueError:
        return True


def _forget_gone(connection: sql.BaseDatabaseWrapper) -> None:
    """Drop the warnings of rows no longer queued (the table holds only rows near
    their age limit, so this is one index lookup each)."""
    with connection.cursor() as cursor:
        cursor.execute(
            sql.statement(
                connection,
                "DELETE FROM {table} WHERE NOT EXISTS "
                "(SELECT 1 FROM {queue} q WHERE q.{key} = {table}.{key})",
                table=WARNING_TABLE,
                queue=sql.quoted(connection, sql.table()),
            )
        )
