"""NDJSON dump and load of queued messages: one row a line, so a failure can be
reproduced on another machine.

A line is one row, its key kept:

    {"key": "<hex>", "queue": "mail", "Timestamp": "...", "QueuedAt": "...",
     "Username": "...", "Subject": "...", "Descriptions": [...] | null,
     "Fields": [...] | null, "SkipRecipients": [...] | null, "Code": 3,
     "extra": {<unknown keys>}}

Times are Go's RFC 3339 text to the nanosecond (`.format()`), null for the zero
time. Unknown keys keep any CBOR value in the JSON form of
`deadletter.wire.jsonvalues` (`{"$bytes": ...}`, `{"$float": "NaN"}`, ...).
A row that holds other than one message (an older release's aggregate, a
multi-message row) is `{"key", "queue", "messages": [<the fields above>, ...]}`;
a row that does not decode is `{"key", "queue", "corrupt": "<why>", "value":
{"$bytes": "<base64>"}}` and is loaded back byte for byte.

Both directions stream: a dump reads pages of the key index; a load checks
every line before it writes any (so a malformed line loads nothing), keeping
the checked rows in a temporary file, then inserts them in batches with ON
CONFLICT DO NOTHING, so loading a file again adds nothing. A line is refused
(and with it the file) when it is not a row the queue would hand over: nested
too deeply to read, over `DEADLETTER_MAX_ROW_BYTES`, or a message whose first
failure is in the future (`age.first_failure_error`). A row whose key is
already queued is never overwritten: the load tells the rows queued as the
file has them from those queued with other content (a conflict).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import struct
import tempfile
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter.conf import conf
from deadletter.exceptions import DeadletterError
from deadletter.queue import age, browse, redaction, search
from deadletter.store import scans, sql
from deadletter.wire import codec, keys
from deadletter.wire.gotime import GoOnlyTime, GoTime
from deadletter.wire.jsonvalues import from_json, to_json
from deadletter.wire.messages import Message

__all__ = [
    "LoadError",
    "Loaded",
    "check",
    "dump",
    "dump_total",
    "insert",
    "load",
    "parse_line",
    "row_line",
]

BATCH = 1000
SHOWN_CONFLICTS = 5
_TIMES = ("Timestamp", "QueuedAt")
_STRINGS = ("Username", "Subject")
_LISTS = ("Descriptions", "Fields", "SkipRecipients")
_MESSAGE_KEYS = frozenset((*_TIMES, *_STRINGS, *_LISTS, "Code", "extra", "raw_entries"))


class LoadError(DeadletterError, ValueError):
    """A line of a dump that cannot be loaded; the text names the line."""


@dataclasses.dataclass
class Loaded:
    """What a load did with the rows of a file: `inserted`, `identical` (the key
    already queued with the same bytes) and `conflicting` (the key queued with
    other bytes: left as queued, not written); `conflicts` holds the first
    `SHOWN_CONFLICTS` of these as (line number, key)."""

    rows: int = 0
    inserted: int = 0
    identical: int = 0
    conflicting: int = 0
    conflicts: list[tuple[int, bytes]] = dataclasses.field(default_factory=list)

    def conflict(self, number: int, key: bytes) -> None:
        self.conflicting += 1
        if len(self.conflicts) < SHOWN_CONFLICTS:
            self.conflicts.append((number, key))


def _queue_names(queues: Iterable[str] | None) -> list[tuple[str, int]]:
    """Each queue to dump with its depth (key-range counts): every queue that holds
    a row when `queues` is None; `ValueError` for an invalid name."""
    connection = sql.connection()
    if queues is None:
        found = scans.queue_depths(connection)
    else:
        prefixes = [keys.encode_queue_name(name) for name in dict.fromkeys(queues)]
        with scans.snapshot(connection):
            found = [(p, scans.count_queue(connection, p)) for p in prefixes]
    return [(p.decode("utf-8", errors="replace"), depth) for p, depth in found]


def dump_total(queues: Iterable[str] | None = None) -> int:
    """How many rows `dump` will write (key-range counts), for a progress bar."""
    return sum(depth for _, depth in _queue_names(queues))


def dump(
    out: IO[str] | Any,
    queues: Iterable[str] | None = None,
    *,
    query: search.Query | None = None,
    on_row: Callable[[int], None] | None = None,
    redact: bool = False,
) -> int:
    """Write every row of `queues` (all when None) to `out` in key order, one line
    each, only those `query` matches when it is given; returns the number of
    lines. Reads a page of rows at a time. A dump keeps every value (it is for
    reproducing a failure); `redact` masks what `DEADLETTER_REDACT` names, as for a
    user who may not see it (the search too), and leaves out the corrupt rows of
    the queues it applies to, whose bytes could hold anything."""
    connection = sql.connection()
    written = 0
    with _without_mmap(connection):
        for name, _ in _queue_names(queues):
            low, high = keys.queue_bounds(name)
            rows = (
                sql.iter_range(connection, sql.table(), low, high, BATCH)
                if not query
                else search.iter_matching_rows(
                    query, queue=name, first_batch=BATCH, reveal=not redact
                )
            )
            masked = redact and redaction.applies(name)
            for key, value in rows:
                line = _row_line(key, value, masked)
                if line is None:
                    continue
                out.write(line)
                written += 1
                if on_row is not None:
                    on_row(1)
    return written


@contextlib.contextmanager
def _without_mmap(connection: BaseDatabaseWrapper) -> Iterator[None]:
    """On SQLite, no memory map while a dump reads the whole table.

    With the demo settings' `mmap_size` of 256 MB every page a full scan
    touches stays mapped into the process: a dump of 1,000,000 rows grew RSS by
    259 MB, of which 3 MB was the dump's own. Read through the page cache instead
    (the connection's setting is put back afterwards).
    """
    with sql.sqlite_pragma(connection, "mmap_size", "0"):
        yield


def row_line(key: bytes, value: bytes) -> str:
    """One row as its NDJSON line (with the newline)."""
    line = _row_line(key, value, False)
    assert line is not None  # only a redacted corrupt row has none
    return line


def _row_line(key: bytes, value: bytes, redact: bool) -> str | None:
    """`row_line`; `redact`: its redacted values masked (`queue.redaction`), None
    for a corrupt row (nothing to mask its bytes by)."""
    queue = keys.queue_of(key)
    head: dict[str, Any] = {"key": keys.to_text(key), "queue": queue}
    try:
        msgs = codec.decode(value)
        if redact:
            msgs = redaction.redacted_all(msgs, queue, reveal=False)
    except codec.CodecError as exc:
        if redact:
            return None
        head["corrupt"] = str(exc)
        head["value"] = {"$bytes": base64.b64encode(value).decode("ascii")}
    else:
        # Entries kept as bytes cannot be masked: a redacted dump leaves them out.
        if len(msgs) == 1 and not keys.is_legacy_key(key):
            head.update(_message_json(msgs[0], raw=not redact))
        else:
            head["messages"] = [_message_json(m, raw=not redact) for m in msgs]
    return json.dumps(head, ensure_ascii=False, allow_nan=False, separators=(",", ":")) + "\n"


def _message_json(msg: Message, *, raw: bool) -> dict[str, Any]:
    shown = {
        "Timestamp": _time_text(msg.timestamp),
        "QueuedAt": _time_text(msg.queued_at),
        "Username": msg.username,
        "Subject": msg.subject,
        "Descriptions": msg.descriptions,
        "Fields": msg.fields,
        "SkipRecipients": msg.skip_recipients,
        "Code": int(msg.code),
        "extra": {str(k): to_json(v) for k, v in msg.extra.items()},
    }
    if raw and msg.raw_entries:
        shown["raw_entries"] = [to_json(bytes(entry)) for entry in msg.raw_entries]
    return shown


def _time_text(moment: GoTime | GoOnlyTime | None) -> str | None:
    return None if moment is None else moment.format()


# --- load --------------------------------------------------------------------------


def parse_line(text: str) -> tuple[bytes, bytes]:
    """The (key, value) a line stands for; `ValueError` saying what is wrong."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    key_text, queue = data.pop("key", None), data.pop("queue", None)
    if not isinstance(key_text, str) or not isinstance(queue, str):
        raise ValueError('"key" (hex) and "queue" (text) are required')
    key = keys.from_text(key_text)
    keys.encode_queue_name(queue)
    if keys.queue_of(key) != queue or (not keys.is_legacy_key(key) and _bad_suffix(key)):
        raise ValueError(f"key {key_text} is not a key of queue {queue!r}")
    if "corrupt" in data:
        if set(data) != {"corrupt", "value"} or not isinstance(data["value"], dict):
            raise ValueError('a corrupt row has only "corrupt" and "value": {"$bytes": ...}')
        raw = from_json(data["value"])
        if not isinstance(raw, bytes):
            raise ValueError('"value" of a corrupt row must be {"$bytes": "<base64>"}')
        return key, raw
    if "messages" in data:
        if set(data) != {"messages"} or not isinstance(data["messages"], list):
            raise ValueError('"messages" must be a list and stand alone beside key and queue')
        msgs = [_message(item, f"messages[{i}]") for i, item in enumerate(data["messages"])]
        return key, codec.encode(msgs)
    if keys.is_legacy_key(key):
        raise ValueError('a legacy aggregate key needs "messages"')
    return key, codec.encode_one(_message(data, "the message"))


def _bad_suffix(key: bytes) -> bool:
    try:
        keys.parse_key(key)
    except ValueError:
        return True
    return False


def _message(data: Any, where: str) -> Message:
    if not isinstance(data, dict):
        raise ValueError(f"{where} is not an object")
    unknown = set(data) - _MESSAGE_KEYS
    if unknown:
        raise ValueError(f"{where} has unknown fields: {', '.join(sorted(unknown))}")
    fields: dict[str, Any] = {}
    for name, attr in (("Timestamp", "timestamp"), ("QueuedAt", "queued_at")):
        value = data.get(name)
        if value is not None and not isinstance(value, str):
            raise ValueError(f"{where}: {name} must be RFC 3339 text or null")
        fields[attr] = None if value is None else GoTime.parse(value)
    future = age.first_failure_error(fields["queued_at"])
    if future is not None:
        raise ValueError(f"{where}: {future}")
    for name, attr in (("Username", "username"), ("Subject", "subject")):
        value = data.get(name, "")
        if not isinstance(value, str):
            raise ValueError(f"{where}: {name} must be text")
        fields[attr] = value
    for name, attr in (
        ("Descriptions", "descriptions"),
        ("Fields", "fields"),
        ("SkipRecipients", "skip_recipients"),
    ):
        value = data.get(name)
        if value is not None and not (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
        ):
            raise ValueError(f"{where}: {name} must be a list of text or null")
        fields[attr] = value
    code = data.get("Code", 0)
    if type(code) is not int or not -(2**63) <= code < 2**63:
        raise ValueError(f"{where}: Code must be a 64-bit integer")
    fields["code"] = code
    extra = data.get("extra", {})
    if not isinstance(extra, dict):
        raise ValueError(f"{where}: extra must be an object")
    fields["extra"] = {k: from_json(v) for k, v in extra.items()}
    listed = data.get("raw_entries", [])
    raw = [from_json(entry) for entry in listed] if isinstance(listed, list) else [None]
    if not all(isinstance(entry, bytes) for entry in raw):
        raise ValueError(f'{where}: raw_entries must be a list of {{"$bytes": "<base64>"}}')
    fields["raw_entries"] = tuple(raw)
    return Message(**fields)


def _rows(lines: Iterable[str]) -> Iterator[tuple[int, bytes, bytes]]:
    """(line number, key, value) of every non-blank line; `LoadError` naming the line."""
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            key, value = parse_line(text)
        except (ValueError, TypeError, codec.CodecError) as exc:
            raise LoadError(f"line {number}: {exc}") from None
        except RecursionError:
            raise LoadError(f"line {number}: nested too deeply to read") from None
        if browse.is_too_large(key, len(value)):
            raise LoadError(
                f"line {number}: the row is {len(value):,} bytes, over DEADLETTER_MAX_ROW_BYTES "
                f"({conf.MAX_ROW_BYTES:,}), which the queue never hands over"
            )
        yield number, key, value


def check(
    source: str | IO[str],
    spool: IO[bytes] | None = None,
    *,
    on_bytes: Callable[[int], None] | None = None,
) -> int:
    """Read every line of `source` (a path or a text stream) and return the row
    count; `LoadError` at the first bad line. With `spool`, each row's key and
    value are written to it as they are checked, for `insert`."""
    with contextlib.ExitStack() as stack:
        lines: Iterable[str] = (
            stack.enter_context(open(source, encoding="utf-8"))
            if isinstance(source, str)
            else source
        )
        if on_bytes is not None:
            lines = _counting(lines, on_bytes)
        try:
            total = 0
            for number, key, value in _rows(lines):
                if spool is not None:
                    spool.write(_HEAD.pack(number, len(key), len(value)) + key + value)
                total += 1
            return total
        except UnicodeDecodeError as exc:
            raise LoadError(f"not UTF-8 text: {exc}") from None


def _counting(lines: Iterable[str], on_bytes: Callable[[int], None]) -> Iterator[str]:
    for text in lines:
        on_bytes(len(text.encode("utf-8")) if not text.isascii() else len(text))
        yield text


_HEAD = struct.Struct(">QII")  # line number, key length, value length


def insert(spool: IO[bytes], *, on_row: Callable[[int], None] | None = None) -> Loaded:
    """Insert the rows `check` spooled, keys kept, in batches of `BATCH`, each a
    transaction. A row whose key is already queued is left as it is, and counted
    as identical or as a conflict by comparing the bytes."""
    connection = sql.connection()
    loaded = Loaded()
    batch: list[tuple[int, bytes, bytes]] = []

    def flush() -> None:
        _insert_batch(connection, batch, loaded)
        if on_row is not None:
            on_row(len(batch))
        batch.clear()

    spool.seek(0)
    while head := spool.read(_HEAD.size):
        number, key_len, value_len = _HEAD.unpack(head)
        batch.append((number, spool.read(key_len), spool.read(value_len)))
        loaded.rows += 1
        if len(batch) >= BATCH:
            flush()
    if batch:
        flush()
    return loaded


def _insert_batch(
    connection: BaseDatabaseWrapper, batch: list[tuple[int, bytes, bytes]], loaded: Loaded
) -> None:
    """One transaction: read what the batch's keys hold, insert the others with ON
    CONFLICT DO NOTHING; a key another writer took meanwhile is judged by the
    bytes it holds afterwards."""
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        held = _held(connection, cursor, [key for _, key, _ in batch])
        new: dict[bytes, tuple[int, bytes]] = {}
        for number, key, value in batch:
            queued = held[key] if key in held else new[key][1] if key in new else None
            if queued is None:
                new[key] = (number, value)
            elif queued == value:
                loaded.identical += 1
            else:
                loaded.conflict(number, key)
        if not new:
            return
        rows = [(key, value) for key, (_, value) in new.items()]
        inserted = sql.insert_new(connection, cursor, sql.table(), ("key", "value"), rows)
        loaded.inserted += inserted
        if inserted < len(new):
            now_held = _held(connection, cursor, list(new))
            taken = [(n, k) for k, (n, v) in new.items() if now_held.get(k) != v]
            for number, key in taken:
                loaded.conflict(number, key)
            loaded.identical += len(new) - inserted - len(taken)


_KEYS_PER_SELECT = 500  # well under SQLite's bound-variable limit


def _held(connection: BaseDatabaseWrapper, cursor: Any, batch: list[bytes]) -> dict[bytes, bytes]:
    """The bytes queued under each key of `batch` that is queued."""
    found: dict[bytes, bytes] = {}
    for start in range(0, len(batch), _KEYS_PER_SELECT):
        chunk = batch[start : start + _KEYS_PER_SELECT]
        query = sql.statement(
            connection,
            "SELECT {key}, value FROM {table} WHERE {key} IN ({marks})",
            marks=", ".join(["%s"] * len(chunk)),
        )
        cursor.execute(query, chunk)
        found.update((bytes(key), bytes(value or b"")) for key, value in cursor.fetchall())
    return found


def load(source: str | IO[str], *, on_row: Callable[[int], None] | None = None) -> Loaded:
    """`check` every line of `source`, then `insert` its rows. `LoadError` and
    nothing written for a malformed line. The checked rows wait in a temporary
    file, not in memory."""
    with tempfile.TemporaryFile(prefix="deadletter-load-") as spool:
        check(source, spool)
        return insert(spool, on_row=on_row)
