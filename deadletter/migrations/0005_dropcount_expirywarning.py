"""Per-queue drop counters by reason and the keys already warned about expiry
(`deadletter.counters`): new tables, nothing in the queue table changes."""

from django.db import migrations, models

import deadletter.models


class Migration(migrations.Migration):
    dependencies = [
        ("deadletter", "0004_signature"),
    ]

    operations = [
        migrations.CreateModel(
            name="DropCount",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("queue", deadletter.models.ExactTextField(max_length=255)),
                ("reason", models.CharField(max_length=20)),
                ("count", models.BigIntegerField(default=0)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("queue", "reason"), name="deadletter_dropcount_uniq"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="ExpiryWarning",
            fields=[
                (
                    "key",
                    deadletter.models.HexKeyField(
                        max_length=272, primary_key=True, serialize=False
                    ),
                ),
                ("warned_at", models.DateTimeField()),
            ],
        ),
    ]
