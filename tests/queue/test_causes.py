from __future__ import annotations

import pytest

from deadletter.queue.causes import MAX_SIGNATURE, signature_of


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (
            "ConnectionError: timeout after 30 s on 10.0.0.7:8443",
            "ConnectionError: timeout after 31 s on 10.0.0.9:443",
        ),
        ("KeyError: user 7f3a9c2e1b00 not found", "KeyError: user 00aa11bb22cc not found"),
        (
            "HTTPError: 503 for 0c8a2f4e-1d2b-4c3a-9e8f-1234567890ab",
            "HTTPError: 502 for 11111111-2222-3333-4444-555555555555",
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
