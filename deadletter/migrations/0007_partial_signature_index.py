"""The (signature, key) index holds only the rows with a signature (a partial
index on SQLite and PostgreSQL), so parking a message, whose row has none yet,
writes no entry into it; MySQL/MariaDB have no partial indexes and keep the
whole index."""

from django.db import migrations

import deadletter.models


class Migration(migrations.Migration):
    dependencies = [
        ("deadletter", "0006_backoff_and_passes"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="queuedmessage",
            name="deadletter_signature_key",
        ),
        migrations.AddIndex(
            model_name="queuedmessage",
            index=deadletter.models.NotNullIndex(
                fields=["signature", "key"], name="deadletter_signature_key"
            ),
        ),
    ]
