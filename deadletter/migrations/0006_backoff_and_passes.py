"""The backoff's due time on each row, with the (due_at, key) index a drain walks
the due rows by, and the last pass of each queue (whether its breaker paused it).
Existing rows are due now (NULL): nothing waits until a drain under a backoff
records a failure."""

from django.db import migrations, models

import deadletter.models


class Migration(migrations.Migration):
    dependencies = [
        ("deadletter", "0005_dropcount_expirywarning"),
    ]

    operations = [
        migrations.CreateModel(
            name="QueuePass",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("queue", deadletter.models.ExactTextField(max_length=255, unique=True)),
                ("finished_at", models.DateTimeField()),
                ("paused", models.BooleanField(default=False)),
            ],
        ),
        migrations.AddField(
            model_name="queuedmessage",
            name="due_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AddIndex(
            model_name="queuedmessage",
            index=models.Index(fields=["due_at", "key"], name="deadletter_due_key"),
        ),
    ]
