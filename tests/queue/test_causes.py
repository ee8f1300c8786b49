from __future__ import annotations

from typing import Any

import pytest

from deadletter.queue import rows
from deadletter.queue.causes import LAST_ERROR_KEY, MAX_SIGNATURE, signature_at_park, signature_of
from deadletter.wire.messages import Message


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (
            "ConnectionError: timeout after 30 s on 10.0.0.7:8443",
            "ConnectionError: timeout after 31 s on 10.0.0.9:443",
        ),
        ("KeyError: user 7f3a9c2e1b00 not found", "KeyError: user 00aa11bb22cc not found"),
        ("KeyError: user 7F3A9C2E1B00 at 0XFFEE", "KeyError: user 00AA11BB22CC at 0x12ab"),
        (
            "LookupError: order 503 for 0c8a2f4e-1d2b-4c3a-9e8f-1234567890ab",
            "LookupError: order 502 for 11111111-2222-3333-4444-555555555555",
        ),
        ("KeyError: user 404 not found", "KeyError: user 500 not found"),
        (
            "ConnectionError: http://127.0.0.1:8000/hook refused",
            "ConnectionError: http://192.168.0.7:8000/hook refused",
        ),
        ("OSError: [Errno 111] Connection refused", "OSError: [Errno 110] Connection refused"),
        (
            "URLError: <urlopen error [Errno 111] Connection refused>",
            "URLError: <urlopen error [Errno 113] Connection refused>",
        ),
    ],
)
def test_failures_that_differ_only_in_numbers_ids_and_hex_share_a_signature(one, other) -> None:
    assert signature_of(one) == signature_of(other)


def test_different_exception_classes_or_words_differ() -> None:
    assert signature_of("ConnectionError: down") != signature_of("TimeoutError: down")
    assert signature_of("ValueError: bad subject") != signature_of("ValueError: bad recipient")


def test_no_error_has_no_signature() -> None:
    assert signature_of(None) is None
    assert signature_of("  ") is None
    assert signature_of(42) is None


def test_a_signature_fits_its_column() -> None:
    assert len(signature_of("E: " + "word " * 200) or "") <= MAX_SIGNATURE


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (
            "HTTPError: HTTP Error 500: Internal Server Error",
            "HTTPError: HTTP Error 503: Service Unavailable",
        ),
        ("RuntimeError: status 502 from 10.0.0.7", "RuntimeError: status 504 from 10.0.0.7"),
        ("HTTPError: HTTP 429 Too Many Requests", "HTTPError: HTTP 430 Too Many Requests"),
        (
            "HTTPError: 404 Client Error: Not Found for url: https://x.example/o/1",
            "HTTPError: 410 Client Error: Not Found for url: https://x.example/o/1",
        ),
        ("RuntimeError: hook returned 500", "RuntimeError: hook returned 502"),
        ("HTTPError: HTTP/1.1 502 Bad Gateway", "HTTPError: HTTP/1.1 503 Bad Gateway"),
        ("E: status_code=500", "E: status_code=503"),
        (
            "HTTPStatusError: Server error '500 Internal Server Error' for url 'https://h/'",
            "HTTPStatusError: Server error '501 Internal Server Error' for url 'https://h/'",
        ),
    ],
)
def test_http_status_codes_are_causes_of_their_own(one, other) -> None:
    assert signature_of(one) != signature_of(other)


def test_a_status_stays_while_the_numbers_and_ids_around_it_fold() -> None:
    one = "HTTPError: 404 Client Error: Not Found for url: https://x.example/orders/12345"
    other = "HTTPError: 404 Client Error: Not Found for url: https://x.example/orders/67890"
    assert signature_of(one) == signature_of(other)
    assert signature_of(one) == (
        "HTTPError: 404 Client Error: Not Found for url: https://x.example/orders/#"
    )
    assert (
        signature_of("RuntimeError: status 502 after 31 s") == "RuntimeError: status 502 after # s"
    )


def test_a_park_with_a_last_error_has_its_signature_and_one_without_has_none() -> None:
    failed = Message(subject="s", extra={LAST_ERROR_KEY: "ConnectionError: timeout after 30 s"})
    assert signature_at_park("q", failed) == "ConnectionError: timeout after # s"
    assert signature_at_park("q", failed) == signature_of(failed.extra[LAST_ERROR_KEY])
    assert signature_at_park("q", Message(subject="s")) is None
    assert signature_at_park("q", Message(subject="s", extra={"order_id": 7})) is None
    assert signature_at_park("q", Message(subject="s", extra={LAST_ERROR_KEY: 42})) is None


def test_the_park_reads_the_key_the_drain_records_the_failure_under() -> None:
    assert LAST_ERROR_KEY == rows.LAST_ERROR_KEY


def test_a_redacted_value_is_masked_bare_so_two_customers_are_one_cause(settings: Any) -> None:
    settings.DEADLETTER_REDACT = {"billing.*": ["username"]}

    def refused(address: str) -> Message:
        return Message(username=address, extra={LAST_ERROR_KEY: f"Refused: <{address}> unknown"})

    ada, bob = refused("ada@example.com"), refused("bob.smith@example.org")
    assert signature_at_park("billing.mail", ada) == "Refused: <•••> unknown"
    assert signature_at_park("billing.mail", bob) == "Refused: <•••> unknown"
    assert signature_at_park("support", ada) == "Refused: <ada@example.com> unknown"
