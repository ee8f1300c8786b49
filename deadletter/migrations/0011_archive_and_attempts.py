"""The archive (what left a queue other than by delivery, kept to be read and
restored) and each message's failed attempts."""

from django.db import migrations, models

import deadletter.models


class Migration(migrations.Migration):
    dependencies = [
        ("deadletter", "0010_queue_overview_entry"),
    ]

    operations = [
        migrations.CreateModel(
            name="ArchivedMessage",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("key", deadletter.models.HexKeyField(max_length=272)),
                ("queue", deadletter.models.ExactTextField(max_length=255)),
                ("value", models.BinaryField()),
                (
                    "reason",
                    models.CharField(
                        choices=[
                            ("deleted", "Deleted"),
                            ("expired", "Expired"),
                            ("permanent", "Permanent"),
                            ("max_attempts", "Max Attempts"),
                            ("corrupt", "Corrupt"),
                            ("unsealed", "Unsealed"),
                            ("edited", "Edited"),
                        ],
                        max_length=20,
                    ),
                ),
                ("actor", models.CharField(blank=True, default="", max_length=150)),
                ("archived_at", models.DateTimeField()),
                ("last_error", models.TextField(blank=True, default="")),
                (
                    "signature",
                    deadletter.models.ExactTextField(blank=True, max_length=200, null=True),
                ),
            ],
            options={
                "verbose_name": "archived message",
                "verbose_name_plural": "archived messages",
                "ordering": ["id"],
                "permissions": [
                    ("restore_archivedmessage", "Can restore archived messages to their queue")
                ],
                "indexes": [
                    models.Index(
                        fields=["queue", "archived_at", "id"], name="deadletter_archive_queue"
                    ),
                    models.Index(fields=["key", "id"], name="deadletter_archive_key"),
                    models.Index(fields=["archived_at", "id"], name="deadletter_archive_at"),
                ],
            },
        ),
        migrations.CreateModel(
            name="Attempt",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("key", deadletter.models.HexKeyField(max_length=272)),
                ("at", models.DateTimeField()),
                ("duration", models.FloatField(blank=True, null=True)),
                ("outcome", models.CharField(max_length=20)),
                ("error", models.TextField(blank=True, default="")),
                ("actor", models.CharField(blank=True, default="", max_length=150)),
            ],
            options={
                "ordering": ["id"],
                "indexes": [models.Index(fields=["key", "id"], name="deadletter_attempt_key")],
            },
        ),
    ]
