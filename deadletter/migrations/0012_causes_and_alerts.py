"""Causes tracked as incidents, and the sent state of each alert."""

from django.db import migrations, models

import deadletter.models


class Migration(migrations.Migration):
    dependencies = [
        ("deadletter", "0011_archive_and_attempts"),
    ]

    operations = [
        migrations.CreateModel(
            name="AlertState",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("rule", models.CharField(max_length=40)),
                ("queue", deadletter.models.ExactTextField(blank=True, default="", max_length=255)),
                (
                    "subject",
                    deadletter.models.ExactTextField(blank=True, default="", max_length=200),
                ),
                (
                    "state",
                    models.CharField(
                        choices=[("firing", "Firing"), ("cleared", "Cleared")],
                        default="firing",
                        max_length=20,
                    ),
                ),
                ("fired_at", models.DateTimeField()),
                ("sent_at", models.DateTimeField(blank=True, null=True)),
                ("cleared_at", models.DateTimeField(blank=True, null=True)),
                ("cleared_sent_at", models.DateTimeField(blank=True, null=True)),
                ("claimed_by", models.CharField(blank=True, default="", max_length=200)),
                ("claimed_until", models.DateTimeField(blank=True, null=True)),
                ("figures", models.TextField(blank=True, default="")),
            ],
            options={
                "indexes": [
                    models.Index(fields=["state", "id"], name="deadletter_alertstate_state")
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("rule", "queue", "subject"), name="deadletter_alertstate_uniq"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="Cause",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("queue", deadletter.models.ExactTextField(max_length=255)),
                ("signature", deadletter.models.ExactTextField(max_length=200)),
                ("first_seen", models.DateTimeField()),
                ("last_seen", models.DateTimeField()),
                ("count", models.BigIntegerField(default=0)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("open", "Open"),
                            ("acknowledged", "Acknowledged"),
                            ("resolved", "Resolved"),
                            ("muted", "Muted"),
                        ],
                        default="open",
                        max_length=20,
                    ),
                ),
                ("muted_until", models.DateTimeField(blank=True, null=True)),
                ("opened_at", models.DateTimeField()),
                ("reopened", models.BooleanField(default=False)),
                ("resolved_at", models.DateTimeField(blank=True, null=True)),
                ("owner", models.CharField(blank=True, default="", max_length=150)),
                ("note", models.TextField(blank=True, default="")),
            ],
            options={
                "verbose_name": "cause",
                "verbose_name_plural": "causes",
                "ordering": ["-last_seen", "-id"],
                "indexes": [
                    models.Index(
                        fields=["status", "last_seen", "id"], name="deadletter_cause_status"
                    ),
                    models.Index(
                        fields=["queue", "last_seen", "id"], name="deadletter_cause_queue"
                    ),
                    models.Index(fields=["opened_at", "id"], name="deadletter_cause_opened"),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("queue", "signature"), name="deadletter_cause_uniq"
                    )
                ],
            },
        ),
    ]
