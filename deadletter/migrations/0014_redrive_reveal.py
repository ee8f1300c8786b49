"""Whether a redrive's search may match what DEADLETTER_REDACT masks (its planner's view)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("deadletter", "0013_queue_access"),
    ]

    operations = [
        migrations.AddField(
            model_name="redrive",
            name="reveal",
            field=models.BooleanField(default=True),
        ),
    ]
