# Frozen for migration 0009: the search terms of a row as they were defined then. Never edit.
"""The words the search index holds for a row (`queue.search.words` of the time),
read from the Go maps `_0002_frozen.rows.message_maps` gives, and the batches
that index the rows 0008 left pending."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter.migrations._0002_frozen import rows
from deadletter.migrations._0002_frozen.items import CodecError

TERM_CHARS = 64
BATCH = 500
BATCH_SECONDS = 0.1
BATCH_POSTINGS = 2000
_WORD = re.compile(r"\w+")
_FIELDS = ("Subject", "Username")
_LISTS = ("Descriptions", "Fields")
NOT_TEXT = frozenset(("Timestamp", "QueuedAt", "SkipRecipients", "Code", *_FIELDS, *_LISTS))


def _flatten(value: Any, depth: int = 0) -> Iterator[str]:
    if depth > 40 or value is None:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, bool | int | float):
        yield str(value)
    elif isinstance(value, dict):
        for name, item in value.items():
            yield from _flatten(name, depth + 1)
            yield from _flatten(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _flatten(item, depth + 1)


def row_terms(value: bytes) -> set[str]:
    terms: set[str] = set()
    try:
        for wire in rows.message_maps(value):
            terms.add(f"code:{int(wire['Code'])}")
            texts = [wire[name] or "" for name in _FIELDS]
            for name in _LISTS:
                texts.extend(wire[name] or ())
            for name, raw in wire.items():
                if name not in NOT_TEXT:
                    texts.extend(_flatten(raw))
            for text in texts:
                terms.update(w[:TERM_CHARS] for w in _WORD.findall(text.casefold()))
    except CodecError:
        return set()
    return terms


def index_pending_rows(connection: BaseDatabaseWrapper, table: str, terms_table: str) -> int:
    """Index every pending row in short transactions of at most `BATCH` rows,
    `BATCH_POSTINGS` postings or `BATCH_SECONDS` of reading; a row rewritten
    meanwhile stays pending for the live indexer."""
    quote = connection.ops.quote_name
    key = quote("key")
    select = (
        f"SELECT {key}, value FROM {quote(table)} WHERE search_pending = 1 AND {key} >= %s "
        f"ORDER BY search_pending, {key} LIMIT {BATCH}"
    )
    clear = f"UPDATE {quote(table)} SET search_pending = NULL WHERE {key} = %s AND value = %s"
    if connection.vendor == "mysql":
        insert = f"INSERT IGNORE INTO {quote(terms_table)} ({key}, term) VALUES (%s, %s)"
    else:
        insert = (
            f"INSERT INTO {quote(terms_table)} ({key}, term) VALUES (%s, %s) ON CONFLICT DO NOTHING"
        )
    done = 0
    after = b""
    while True:
        with connection.cursor() as cursor:
            cursor.execute(select, (after,))
            batch = [(bytes(k), bytes(v or b"")) for k, v in cursor.fetchall()]
        if not batch:
            return done
        started = time.monotonic()
        postings: list[tuple[bytes, str]] = []
        settled: list[tuple[bytes, bytes]] = []
        for row_key, value in batch:
            postings.extend((row_key, term) for term in row_terms(value))
            settled.append((row_key, value))
            if len(postings) >= BATCH_POSTINGS or time.monotonic() - started >= BATCH_SECONDS:
                break
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            if postings:
                cursor.executemany(insert, postings)
            cursor.executemany(clear, settled)
        done += len(settled)
        after = settled[-1][0] + b"\x00"
