"""Moving queues in and out of the Go program's database: an SQLite file with one table,
`kv(key BLOB PRIMARY KEY, value BLOB, expires_at INTEGER)`.

Its queue rows use this app's key layout and CBOR values, so a per-message
row moves across as it is, key and bytes unchanged. Rows with `expires_at`
set are the Go program's de-duplication marks, not queue rows: they are
never read or written here. A legacy aggregate row is split on the way in
(and on the way out, should one still be here) by the same rule as fetch
and the data migration (`legacy.legacy_message_rows`), under keys derived
from the file alone, so importing a file twice, or a file exported from
here, writes nothing twice: a row whose key the destination already holds
is counted as present and left alone.

The source file of an import is opened read-only and read in one snapshot.
An export writes a new file under a temporary name and renames it into place
when complete, or writes an existing kv file in one transaction, so a
failure leaves nothing behind. Bad input is a `KvFileError` with one line
for the user, raised before anything is written.
"""

from __future__ import annotations

from deadletter.transfer.kvcheck import KvFileError
from deadletter.transfer.kvfile.exporting import export_kv
from deadletter.transfer.kvfile.importing import import_kv
from deadletter.transfer.kvfile.rows import (
    KV_SCHEMA,
    QueueCounts,
    Report,
    count_kv_rows,
    format_report,
    kv_queue_names,
    open_kv,
)

__all__ = [
    "KV_SCHEMA",
    "KvFileError",
    "QueueCounts",
    "Report",
    "count_kv_rows",
    "export_kv",
    "format_report",
    "import_kv",
    "kv_queue_names",
    "open_kv",
]
