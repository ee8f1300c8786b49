from __future__ import annotations

import base64
from typing import Any

from deadletter import keys
from deadletter.inspection import QueueSummary, Row
from deadletter.messages import Message


def message_data(msg: Message) -> dict[str, Any]:
    return {
        "timestamp": msg.timestamp.format() if msg.timestamp else None,
        "queued_at": msg.queued_at.format() if msg.queued_at else None,
        "username": msg.username,
        "subject": msg.subject,
        "descriptions": msg.descriptions,
        "fields": msg.fields,
        "skip_recipients": msg.skip_recipients,
        "code": int(msg.code),
        "code_name": getattr(msg.code, "name", None),
        "extra": {name: _json_safe(value) for name, value in msg.extra.items()},
    }


def row_data(row: Row) -> dict[str, Any]:
    when = keys.written_at(row.key)
    return {
        "key": keys.to_text(row.key),
        "queue": keys.queue_of(row.key),
        "enqueued_at": when.isoformat() if when else None,
        "legacy": row.is_legacy,
        "corrupt": row.messages is None,
        "messages": [message_data(m) for m in row.messages or []],
    }


def summary_data(summary: QueueSummary) -> dict[str, Any]:
    return {
        "name": summary.name,
        "rows": summary.rows,
        "oldest_queued_at": summary.oldest_queued_at,
        "oldest_age_seconds": summary.oldest_age,
    }


def _json_safe(value: Any) -> Any:
    """Unknown keys may hold any CBOR value; JSON gets their nearest plain form."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    return repr(value)
