"""The key in a URL is its hex text, both ways."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from deadletter.models import HexKeyField
from deadletter.urls import KeyConverter
from deadletter.wire import keys


def test_key_converter_round_trips_hex() -> None:
    key = keys.new_key("q")
    converter = KeyConverter()
    assert converter.to_python(converter.to_url(key)) == key


def test_key_converter_refuses_odd_length_hex() -> None:
    with pytest.raises(ValueError, match="not a key"):
        KeyConverter().to_python("abc")


@pytest.mark.parametrize(
    "text",
    ["", "a", "ab cd", "0xab", "zz", "ab\n", "ab" * (keys.MAX_ADDRESSABLE_KEY_BYTES + 1)],
)
def test_every_reader_of_key_text_refuses_what_keys_from_text_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="not a key in hex"):
        keys.from_text(text)
    with pytest.raises(ValueError, match="not a key in hex"):
        KeyConverter().to_python(text)
    with pytest.raises(ValidationError, match="not a key in hex"):
        HexKeyField().to_python(text)


def test_every_reader_of_key_text_takes_either_case_up_to_the_limit() -> None:
    longest = "Ab" * keys.MAX_ADDRESSABLE_KEY_BYTES
    assert keys.from_text(longest) == bytes([0xAB]) * keys.MAX_ADDRESSABLE_KEY_BYTES
    assert KeyConverter().to_python(longest) == keys.from_text(longest)
    assert HexKeyField().to_python(longest) == keys.from_text(longest)
