"""Split every legacy aggregate row into per-message rows; fold them back on the way down.

Runs the frozen copy of the split and fold code in `_0002_frozen` (never the
live `legacy`, `codec` or `messages`, which may change after this migration).
Non-atomic on purpose: each aggregate is split in short transactions of its own
(batches of rows, then the aggregate's delete), so a migration killed half way
keeps every queue it finished and a rerun carries on with the rest; the queue in
hand keeps its aggregate beside the batches stored so far (possibly all of them),
each message once, and the rerun stores none of them twice. One transaction
around everything would hold the write lock for the whole table and throw all of
it away on a crash.
"""

from __future__ import annotations

import logging

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

from deadletter.migrations._0002_frozen import legacy

logger = logging.getLogger("deadletter")


def split_legacy_blobs(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    model = apps.get_model("deadletter", "QueuedMessage")
    connection = schema_editor.connection
    split, stored = legacy.split_legacy_rows(connection, model._meta.db_table)
    if not split:
        return
    logger.info(
        "migration split legacy rows database=%s aggregates=%s rows=%s",
        connection.alias,
        split,
        stored,
    )


def fold_into_legacy_blobs(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    model = apps.get_model("deadletter", "QueuedMessage")
    connection = schema_editor.connection
    folded, messages = legacy.fold_all_queues(connection, model._meta.db_table)
    logger.info(
        "migration folded queues into legacy rows database=%s queues=%s messages=%s",
        connection.alias,
        folded,
        messages,
    )


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("deadletter", "0001_initial"),
    ]

    operations = [
        migrations.RunPython(split_legacy_blobs, fold_into_legacy_blobs, elidable=False),
    ]
