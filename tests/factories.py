"""What many test modules build the same way: the repository's paths, rows in the
queue table, parked messages, and the handlers a drain runs.

Two ways to put a message in the queue. `insert`, `insert_at` and `park_aged` write
a row straight into the table with raw SQL, below every check of the store: any
key, any bytes, any age, as another writer (the Go program, an older release)
may leave it, and with the columns of any migration state. `park` goes through
`store_failed_msgs`, as a site's code does.

Safe to import before Django is set up (the harness modules import it in child
processes): what needs the app registry is imported inside the function using it.
Handlers are named in settings by dotted path, e.g.
`DEADLETTER_HANDLERS = {"q": "tests.factories.ok_handler"}`.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import pytest
from django.db import connection

from deadletter.wire import codec, keys
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message

__all__ = [
    "BILLING_REDACT",
    "CARD",
    "DAY",
    "EMAIL",
    "FIXTURES",
    "REPO",
    "TABLE",
    "RecipientRefused",
    "failing_handler",
    "insert",
    "insert_at",
    "kill_manage_py",
    "manage_py",
    "ok_handler",
    "park",
    "park_aged",
    "park_refund",
    "parked",
    "parked_messages",
    "refusing_handler",
    "table_rows",
]

REPO = Path(__file__).resolve().parents[1]
"""The repository's root, where manage.py is: the working directory of child processes."""

FIXTURES = REPO / "tests" / "fixtures" / "go-cbor"
"""What the Go program wrote: CBOR values, its kv database, and manifest.json describing them."""

DAY = 86_400 * 10**9
"""A day in nanoseconds, the unit of a key's time and of GoTime."""

TABLE = "deadletter_queuedmessage"
"""The queue table (QueuedMessage's, named here so no model is imported)."""


# --- raw rows ---------------------------------------------------------------------


def raw_sql(template: str) -> str:
    """`template` with `{table}` the queue table and `{key}` its key column, each
    quoted for the backend (`KEY` is a reserved word on MySQL)."""
    return template.format(
        table=connection.ops.quote_name(TABLE), key=connection.ops.quote_name("key")
    )


def insert(key: bytes, value: bytes) -> None:
    """A raw row written straight into the queue table: `key` and `value` as given."""
    with connection.cursor() as cursor:
        cursor.execute(raw_sql("INSERT INTO {table} ({key}, value) VALUES (%s, %s)"), (key, value))


def insert_at(queue: str, time_ns: int, seq: int, value: Message | list[Message] | bytes) -> bytes:
    """A raw row keyed as the store keys one parked in `queue` at `time_ns` (the
    enqueue time, in nanoseconds since the epoch) with sequence number `seq`.
    `value` is a message, or several in one row, encoded as the store encodes
    them, or bytes written as they are. Returns the key."""
    key = keys.make_key(queue, time_ns, seq)
    if isinstance(value, Message):
        value = codec.encode_one(value)
    elif isinstance(value, list):
        value = codec.encode(value)
    insert(key, value)
    return key


def park_aged(
    queue: str, days_ago: float, *, seq: int = 1, attempts: int = 0, subject: str | None = None
) -> bytes:
    """A message in `queue` parked `days_ago` days ago: its key's time and its first
    failure (`queued_at`) both then, written as a raw row so it may be past the age
    limit. `attempts` is what earlier deliveries counted (none recorded when 0);
    the subject is "m<seq>" unless given. Returns the key."""
    at = GoTime.now().unix_ns - int(days_ago * DAY)
    extra = {"Attempts": attempts} if attempts else {}
    msg = Message(
        subject=f"m{seq}" if subject is None else subject, queued_at=GoTime(at), extra=extra
    )
    return insert_at(queue, at, seq, msg)


def table_rows() -> list[tuple[bytes, bytes]]:
    """Every row of the queue table as (key, value), in key order, read with raw SQL."""
    with connection.cursor() as cursor:
        cursor.execute(raw_sql("SELECT {key}, value FROM {table}"))
        return sorted((bytes(k), bytes(v)) for k, v in cursor.fetchall())


# --- through the store --------------------------------------------------------------


def park(*subjects: str, queue: str = "q", **fields: Any) -> list[bytes]:
    """A message for each subject parked in `queue` with `store_failed_msgs`, in
    order; `fields` are the other Message fields every one gets (the store stamps
    `queued_at` with now unless it is given). Returns their keys."""
    from deadletter.queue import store_failed_msgs

    return [store_failed_msgs(queue, Message(subject=s, **fields)) for s in subjects]


# A billing queue whose sensitive values `DEADLETTER_REDACT` names (docs/redaction.md).
EMAIL = "ada@example.com"
CARD = "4111111111111111"
BILLING_REDACT = {"billing.*": ["username", "fields[0]", "CeleryKwargs.email", "card_number"]}


def park_refund(subject: str = "refund failed", queue: str = "billing.refunds") -> bytes:
    """A refund parked with a customer's address and card in four places
    `BILLING_REDACT` names, and an expiry date it does not."""
    (key,) = park(
        subject,
        queue=queue,
        username=EMAIL,
        fields=[CARD, "12/30"],
        extra={"CeleryKwargs": {"email": EMAIL, "amount": 12}, "card_number": CARD},
    )
    return key


def parked(queue: str = "q") -> list[str]:
    """The subjects `fetch_failed_msgs` reads from `queue`, oldest first."""
    return [m.subject for m in parked_messages(queue)]


def parked_messages(queue: str = "q") -> list[Message]:
    """The messages `fetch_failed_msgs` reads from `queue`, oldest first."""
    from deadletter.queue import fetch_failed_msgs

    return [item.msg for item in fetch_failed_msgs(queue)]


# --- handlers -----------------------------------------------------------------------


def ok_handler(msg: Message) -> None:
    """Delivers every message."""


def failing_handler(msg: Message) -> None:
    """Fails every delivery as an unreachable downstream does. Its text has the
    numbers (a duration, an address) that a failure signature replaces with #:
    "ConnectionError: timeout after # s talking to #"."""
    raise ConnectionError("timeout after 30 s talking to 10.0.0.7:8443")


class RecipientRefused(Exception):
    """A mail server's refusal, which names the address it refused."""


def refusing_handler(msg: Message) -> None:
    """Fails as a mail server refusing the recipient does: its text quotes the
    message's address, so the error carries a value redaction may mask."""
    raise RecipientRefused(f"<{msg.username}> refused: 550 5.1.1 no such user")


# --- manage.py in a child process --------------------------------------------------


def manage_py(
    *args: str,
    env: dict[str, str],
    input: str | None = None,
    timeout: float = 120,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`python manage.py ARGS` in a child at the repository's root, as an operator
    runs it, its output captured as text; its exit status is the caller's to
    judge unless `check`. `timeout` is a hang guard."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=env,
        input=input,
        capture_output=True,
        text=True,
        check=check,
        timeout=timeout,
    )


# --- crash tests -------------------------------------------------------------------


def kill_manage_py(
    args: list[str], env: dict[str, str], marker: str, lines: int, rng: random.Random
) -> int:
    """Run `manage.py ARGS` in a child; once its stderr has shown `marker` on `lines`
    lines (or it ended), SIGKILL it after a random pause of up to 0.15 s: inside
    the next unit of work, between two, or after the last. Returns the marked
    lines seen, which the caller's invariant is measured against."""
    child = subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stderr is not None
    seen = 0
    while seen < lines and (line := child.stderr.readline()):
        seen += marker in line
    time.sleep(rng.uniform(0, 0.15))
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stderr.close()
    return seen


def not_allowed_here(reason: str) -> NoReturn:
    """Skip a test the machine will not let run (no mount, chattr or user
    namespaces); with DEADLETTER_REQUIRE_SYSTEM=1 (CI sets it) fail instead."""
    if os.environ.get("DEADLETTER_REQUIRE_SYSTEM") == "1":
        pytest.fail(f"{reason} (DEADLETTER_REQUIRE_SYSTEM=1)")
    pytest.skip(reason)
