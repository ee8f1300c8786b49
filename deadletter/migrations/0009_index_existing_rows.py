"""Index the words of every row parked before the search existed (0008 left them
all pending), in short transactions as 0002's split does: each batch holds the
write lock for at most about 0.1 s of work, and a migration killed half way
keeps what it indexed and carries on with the rest. Runs the frozen copy of the
terms rule (`_0009_frozen`), never the live one. Reversing it empties the index
and marks every row pending again."""

from __future__ import annotations

import logging

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

from deadletter.migrations._0009_frozen import index_pending_rows

logger = logging.getLogger("deadletter")


def index_existing_rows(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    rows = apps.get_model("deadletter", "QueuedMessage")._meta.db_table
    terms = apps.get_model("deadletter", "SearchTerm")._meta.db_table
    done = index_pending_rows(schema_editor.connection, rows, terms)
    if done:
        logger.info(
            "migration indexed rows for search database=%s rows=%s",
            schema_editor.connection.alias,
            done,
        )


def forget_the_index(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    apps.get_model("deadletter", "SearchTerm").objects.using(
        schema_editor.connection.alias
    ).all().delete()
    apps.get_model("deadletter", "QueuedMessage").objects.using(
        schema_editor.connection.alias
    ).update(search_pending=1)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("deadletter", "0008_search_and_redrives"),
    ]

    operations = [
        migrations.RunPython(index_existing_rows, forget_the_index, elidable=False),
    ]
