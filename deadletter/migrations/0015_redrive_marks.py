"""Why a redrive left messages (gone, held, waiting, a taken key) and the marks of the
keys its walk took past its cursor, so its counts survive a kill."""

import django.db.models.deletion
from django.db import migrations, models

import deadletter.models


class Migration(migrations.Migration):
    dependencies = [
        ("deadletter", "0014_redrive_reveal"),
    ]

    operations = [
        migrations.AddField(
            model_name="redrive",
            name="gone",
            field=models.BigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="redrive",
            name="held",
            field=models.BigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="redrive",
            name="waiting",
            field=models.BigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="redrive",
            name="conflicts",
            field=models.BigIntegerField(default=0),
        ),
        migrations.CreateModel(
            name="RedriveMark",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("key", deadletter.models.HexKeyField(max_length=272)),
                ("counted", models.BooleanField(default=False)),
                ("taken_at", models.DateTimeField()),
                (
                    "redrive",
                    models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="deadletter.redrive",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("redrive", "key"), name="deadletter_redrivemark_key"
                    )
                ],
            },
        ),
    ]
