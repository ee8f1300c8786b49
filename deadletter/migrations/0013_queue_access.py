"""Per-queue access (`QueueAccess`) and the permission to see redacted values."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("deadletter", "0012_causes_and_alerts"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="queuedmessage",
            options={
                "permissions": [
                    ("drain_queuedmessage", "Can hand queued messages back to their handler"),
                    ("redrive_queuedmessage", "Can start and cancel redrives of queued messages"),
                    ("view_unredacted_queuedmessage", "Can see the values DEADLETTER_REDACT hides"),
                ],
                "verbose_name": "queued message",
                "verbose_name_plural": "queued messages",
            },
        ),
        migrations.CreateModel(
            name="QueueAccess",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                (
                    "queues",
                    models.CharField(help_text="A shell-style pattern: billing.*", max_length=255),
                ),
                ("view", models.BooleanField(default=True)),
                ("retry", models.BooleanField(default=False)),
                ("edit", models.BooleanField(default=False)),
                ("delete", models.BooleanField(default=False)),
                ("redrive", models.BooleanField(default=False)),
                (
                    "group",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="auth.group",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "verbose_name": "queue access",
                "verbose_name_plural": "queue access",
                "ordering": ["queues", "id"],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("group__isnull", False), ("user__isnull", True)),
                            models.Q(("group__isnull", True), ("user__isnull", False)),
                            _connector="OR",
                        ),
                        name="deadletter_queueaccess_one_holder",
                    )
                ],
            },
        ),
    ]
