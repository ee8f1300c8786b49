"""The search index (`SearchTerm`, and `search_pending` on every row, which the
database's own default sets on each INSERT) and the stored redrives.

`search_pending` is added by a plain `ALTER TABLE ... ADD COLUMN ... DEFAULT 1`
on every backend: constant time on SQLite (where Django would copy the table to
add a column with a database default, holding the write lock for the whole copy),
PostgreSQL (>= 11) and MySQL/MariaDB (an instant column). Every existing row
reads 1, waiting for its words: 0009 indexes them in short batches.
"""

from django.db import migrations, models

import deadletter.models

ADD_PENDING = (
    "ALTER TABLE deadletter_queuedmessage ADD COLUMN search_pending smallint DEFAULT 1 NULL"
)
DROP_PENDING = "ALTER TABLE deadletter_queuedmessage DROP COLUMN search_pending"


class Migration(migrations.Migration):
    dependencies = [
        ("deadletter", "0007_partial_signature_index"),
    ]

    operations = [
        migrations.CreateModel(
            name="Redrive",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("queue", deadletter.models.ExactTextField(max_length=255)),
                ("search", models.TextField(blank=True, default="")),
                ("after", models.DateTimeField(blank=True, null=True)),
                ("before", models.DateTimeField(blank=True, null=True)),
                (
                    "destination",
                    deadletter.models.ExactTextField(blank=True, max_length=255, null=True),
                ),
                ("rate", models.FloatField(blank=True, null=True)),
                ("ramp", deadletter.models.StepsField(blank=True, default=list, max_length=200)),
                ("stop_after", models.FloatField(blank=True, null=True)),
                ("ignore_backoff", models.BooleanField(default=False)),
                ("concurrency", models.PositiveIntegerField(default=1)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("planned", "Planned"),
                            ("running", "Running"),
                            ("finished", "Finished"),
                            ("stopped", "Stopped"),
                            ("cancelled", "Cancelled"),
                            ("failed", "Failed"),
                        ],
                        default="planned",
                        max_length=20,
                    ),
                ),
                ("reason", models.TextField(blank=True, default="")),
                ("started_by", models.CharField(blank=True, default="", max_length=150)),
                ("until", deadletter.models.HexKeyField(blank=True, max_length=272, null=True)),
                ("cursor", deadletter.models.HexKeyField(blank=True, max_length=272, null=True)),
                ("matched", models.BigIntegerField(default=0)),
                ("delivered", models.BigIntegerField(default=0)),
                ("failed", models.BigIntegerField(default=0)),
                ("dropped", models.BigIntegerField(default=0)),
                ("moved", models.BigIntegerField(default=0)),
                ("remaining", models.BigIntegerField(default=0)),
                ("created_at", models.DateTimeField()),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                ("runner", models.CharField(blank=True, default="", max_length=200)),
                ("heartbeat_at", models.DateTimeField(blank=True, null=True)),
            ],
            options={
                "ordering": ["-id"],
            },
        ),
        migrations.CreateModel(
            name="SearchTerm",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "term", "key", blank=True, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("term", deadletter.models.ExactTextField(max_length=64)),
                ("key", deadletter.models.HexKeyField(max_length=272)),
            ],
        ),
        migrations.AlterModelOptions(
            name="queuedmessage",
            options={
                "permissions": [
                    ("drain_queuedmessage", "Can hand queued messages back to their handler"),
                    ("redrive_queuedmessage", "Can start and cancel redrives of queued messages"),
                ],
                "verbose_name": "queued message",
                "verbose_name_plural": "queued messages",
            },
        ),
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(ADD_PENDING, DROP_PENDING)],
            state_operations=[
                migrations.AddField(
                    model_name="queuedmessage",
                    name="search_pending",
                    field=models.SmallIntegerField(
                        blank=True, db_default=1, editable=False, null=True
                    ),
                ),
            ],
        ),
        migrations.AddIndex(
            model_name="queuedmessage",
            index=deadletter.models.NotNullIndex(
                fields=["search_pending", "key"], name="deadletter_search_pending"
            ),
        ),
        migrations.AddIndex(
            model_name="redrive",
            index=models.Index(fields=["status", "id"], name="deadletter_redrive_status"),
        ),
    ]
