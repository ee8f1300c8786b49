"""The failure signature column and its (signature, key) index: grouping and the
"cause" filter read the index, never decode rows. Existing rows have none until
the drain records their next failure."""

from django.db import migrations, models

import deadletter.models


class Migration(migrations.Migration):
    dependencies = [
        ("deadletter", "0003_hex_key_field"),
    ]

    operations = [
        migrations.AddField(
            model_name="queuedmessage",
            name="signature",
            field=deadletter.models.ExactTextField(
                blank=True, editable=False, max_length=200, null=True
            ),
        ),
        migrations.AddIndex(
            model_name="queuedmessage",
            index=models.Index(fields=["signature", "key"], name="deadletter_signature_key"),
        ),
    ]
