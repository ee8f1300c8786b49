"""`deadletter_dump` keeps redacted values (it is for reproducing a failure) and
masks them with `--redact`."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from deadletter.models import QueuedMessage
from tests.factories import insert, park, parked_messages

pytestmark = pytest.mark.django_db

EMAIL = "ada@example.com"


@pytest.fixture(autouse=True)
def redact(settings: Any) -> None:
    settings.DEADLETTER_REDACT = {"billing.*": ["username", "CeleryKwargs.email"]}


def dumped(*args: str) -> list[dict[str, Any]]:
    out = StringIO()
    call_command("deadletter_dump", *args, stdout=out, stderr=StringIO())
    return [json.loads(line) for line in out.getvalue().splitlines()]


def parked_refund() -> None:
    park(
        "refund", queue="billing.refunds", username=EMAIL, extra={"CeleryKwargs": {"email": EMAIL}}
    )
    park("hello", queue="mail", username=EMAIL)


def test_a_dump_keeps_every_value() -> None:
    parked_refund()
    lines = dumped()
    assert [line["Username"] for line in lines] == [EMAIL, EMAIL]
    assert lines[0]["extra"]["CeleryKwargs"] == {"email": EMAIL}


def test_redact_masks_what_the_setting_names_and_nothing_else() -> None:
    parked_refund()
    refund, hello = dumped("--redact")
    assert (refund["Username"], refund["Subject"]) == ("••• (15)", "refund")
    assert refund["extra"]["CeleryKwargs"] == {"email": "••• (15)"}
    assert hello["Username"] == EMAIL


def test_redact_with_a_search_never_matches_a_redacted_value() -> None:
    parked_refund()
    assert [line["queue"] for line in dumped("--search", "ada")] == ["billing.refunds", "mail"]
    assert [line["queue"] for line in dumped("--redact", "--search", "ada")] == ["mail"]


def test_redact_leaves_out_the_corrupt_rows_of_a_redacted_queue() -> None:
    insert(b"billing.refunds\x00" + bytes(16), b"corrupted cbor data")
    insert(b"mail\x00" + bytes(16), b"corrupted cbor data")
    assert [line["queue"] for line in dumped()] == ["billing.refunds", "mail"]
    assert [(line["queue"], "corrupt" in line) for line in dumped("--redact")] == [("mail", True)]


def test_a_redacted_dump_loads_back_masked(tmp_path: Any) -> None:
    parked_refund()
    path = tmp_path / "dump.ndjson"
    dumped("--redact", "-o", str(path))
    QueuedMessage.objects.all().delete()
    call_command("deadletter_load", str(path), stdout=StringIO())
    assert sorted(m.username for m in parked_messages("billing.refunds")) == ["••• (15)"]
    assert [m.username for m in parked_messages("mail")] == [EMAIL]
