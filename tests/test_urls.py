"""The key in a URL is its hex text, both ways."""

from __future__ import annotations

import pytest

from deadletter.urls import KeyConverter
from deadletter.wire import keys


def test_key_converter_round_trips_hex() -> None:
    key = keys.new_key("q")
    converter = KeyConverter()
    assert converter.to_python(converter.to_url(key)) == key


def test_key_converter_refuses_odd_length_hex() -> None:
    with pytest.raises(ValueError, match="not a key"):
        KeyConverter().to_python("abc")
