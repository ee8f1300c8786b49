"""The checks of the queue database: a supported vendor on a configured alias (E006,
E007), and the server itself (W001 to W003, E012)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.core import checks

from deadletter.conf import conf
from deadletter.store import sql

SUPPORTED_VENDORS = ("sqlite", "postgresql", "mysql")


def check_database() -> list[checks.CheckMessage]:
    """The queue needs a binary primary key in byte order and row locks that skip
    a locked row: SQLite, PostgreSQL and MySQL/MariaDB have both; others were never tried."""
    from django.db import connections

    alias = conf.DATABASE
    if alias not in connections.settings:
        return [
            checks.Error(
                f"DEADLETTER_DATABASE names {alias!r}, which is not in DATABASES.",
                hint="Use one of: " + ", ".join(repr(a) for a in connections.settings),
                id="deadletter.E006",
            )
        ]
    vendor = connections[alias].vendor
    if vendor not in SUPPORTED_VENDORS:
        return [
            checks.Error(
                f"The queue database {alias!r} is {vendor}; deadletter runs on SQLite, "
                "PostgreSQL and MySQL/MariaDB only.",
                hint="Route the queue to one of those with DEADLETTER_DATABASE.",
                id="deadletter.E007",
            )
        ]
    return []


SQLITE_OPTIONS = (
    '{"init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", '
    '"transaction_mode": "IMMEDIATE", "timeout": 30}'
)
SQLITE_DURABLE_OPTIONS = (
    '{"init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;", '
    '"transaction_mode": "IMMEDIATE", "timeout": 30}'
)


def _wal_hint(alias: str) -> str:
    """Both settings a site may want, to paste as they are: NORMAL, fast, may lose
    the last commits to an OS crash or a power loss; FULL, which keeps every
    committed park, at the cost of a disk sync per commit (figures from
    `bench/bench_durable.py`)."""
    options = f"DATABASES[{alias!r}]['OPTIONS']"
    return (
        f"For speed, set {options} = {SQLITE_OPTIONS} (a park survives a crash of the "
        "process, but the last ones committed may be lost to an operating-system crash "
        f"or a power loss). Where every park must survive those too, set {options} = "
        f"{SQLITE_DURABLE_OPTIONS}: each commit then waits for the disk's sync (measured: "
        "200 to 570 parks a second one at a time, 6,000 to 28,000 a second parked in "
        "lists of 100 with store_failed_msgs(queue, [messages])). See docs/durability.md."
    )


def _sqlite_file(settings_dict: dict[str, Any]) -> str | None:
    name = str(settings_dict.get("NAME") or "")
    if not name or name == ":memory:" or "mode=memory" in name:
        return None
    return os.path.realpath(name)


def _check_sqlite(alias: str, databases: dict[str, dict[str, Any]]) -> list[checks.CheckMessage]:
    """Read from the settings alone (no connection): WAL set on connect, and no
    other alias on the same file."""
    settings_dict = databases[alias]
    path = _sqlite_file(settings_dict)
    if path is None:
        return []  # in memory: no journal to speak of, no other connection
    found: list[checks.CheckMessage] = []
    init_command = str((settings_dict.get("OPTIONS") or {}).get("init_command") or "")
    if not re.search(r"journal_mode\s*=\s*'?wal\b", init_command, re.IGNORECASE):
        found.append(
            checks.Warning(
                f"The queue database {alias!r} is SQLite without WAL: every store waits "
                "for a full journal sync (about 12 ms against 30 us with WAL), and readers "
                "block the writer.",
                hint=_wal_hint(alias),
                id="deadletter.W001",
            )
        )
    for other, other_dict in databases.items():
        same_file = str(other_dict.get("ENGINE", "")).endswith("sqlite3") and (
            _sqlite_file(other_dict) == path
        )
        if other != alias and same_file:
            found.append(
                checks.Warning(
                    f"DEADLETTER_DATABASE {alias!r} and the alias {other!r} are the same "
                    "SQLite file: a message parked inside a transaction on "
                    f"{other!r} waits for that transaction's write lock and fails "
                    "with 'database is locked'.",
                    hint="Give the queue a SQLite file of its own, or use one alias for "
                    f"both (DEADLETTER_DATABASE = {other!r}): a store inside a transaction "
                    "on the queue's own alias is written the moment the transaction ends.",
                    id="deadletter.W002",
                )
            )
    return found


def check_database_server(
    app_configs: Sequence[AppConfig] | None = None,
    databases: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[checks.CheckMessage]:
    """The queue database itself (run by `migrate` and `check --database`, as
    Django's own database checks are, not by every command): a SQLite file in WAL
    and of its own (W001, W002); drain workers on a shared server claim rows with
    `FOR UPDATE SKIP LOCKED`, which MariaDB has from 10.6 and MySQL from 8.0.1; and
    on MySQL/MariaDB a row as large as `DEADLETTER_MAX_ROW_BYTES` must fit in one
    packet."""
    from django.db import connections

    alias = conf.DATABASE
    if not databases or alias not in databases or alias not in connections.settings:
        return []
    connection = connections[alias]
    if connection.vendor == "sqlite":
        return _check_sqlite(alias, connections.settings)
    found: list[checks.CheckMessage] = []
    if connection.vendor == "mysql":
        found += _check_packet(alias, sql.max_packet(connection))
    if connection.features.has_select_for_update_skip_locked:
        return found
    server = connection.display_name
    version = ".".join(str(part) for part in getattr(connection, "mysql_version", ()))
    return found + [
        checks.Error(
            f"The queue database {alias!r} ({server} {version}) cannot skip locked rows "
            "(SELECT ... FOR UPDATE SKIP LOCKED), which drain workers need so that no two "
            "hand the same message to a handler.",
            hint="Upgrade to MariaDB 10.6 / MySQL 8.0.1 or later, or use PostgreSQL or SQLite.",
            id="deadletter.E012",
        )
    ]


def _check_packet(alias: str, packet: int) -> list[checks.CheckMessage]:
    """A row is sent as a literal in which a byte may take two (mysqlclient escapes
    NUL, quotes, backslashes and newlines), so the packet needs twice the row limit."""
    needed = 2 * conf.MAX_ROW_BYTES + 2**16
    if packet >= needed:
        return []
    return [
        checks.Warning(
            f"The queue database {alias!r} takes statements of at most {packet:,} bytes "
            f"(max_allowed_packet), less than the {needed:,} a row of DEADLETTER_MAX_ROW_BYTES "
            f"({conf.MAX_ROW_BYTES:,}) may need: such a message would be refused at the store.",
            hint=f"Set max_allowed_packet to at least {needed:,} on the server, or lower "
            "DEADLETTER_MAX_ROW_BYTES.",
            id="deadletter.W003",
        )
    ]
