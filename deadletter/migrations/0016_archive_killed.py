"""The archive's `killed` reason (a message set aside because its handler killed its
process `DEADLETTER_MAX_KILLS` times: a choice, no column changes) and an index of a
queue's entries by reason, for the overview's count of them."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("deadletter", "0015_redrive_marks"),
    ]

    operations = [
        migrations.AlterField(
            model_name="archivedmessage",
            name="reason",
            field=models.CharField(
                choices=[
                    ("deleted", "Deleted"),
                    ("expired", "Expired"),
                    ("permanent", "Permanent"),
                    ("max_attempts", "Max Attempts"),
                    ("corrupt", "Corrupt"),
                    ("unsealed", "Unsealed"),
                    ("edited", "Edited"),
                    ("killed", "Killed"),
                ],
                max_length=20,
            ),
        ),
        migrations.AddIndex(
            model_name="archivedmessage",
            index=models.Index(fields=["queue", "reason", "id"], name="deadletter_archive_reason"),
        ),
    ]
