"""URL pieces shared by the edges: the one text form of a key in a path."""

from __future__ import annotations

from deadletter import keys


class KeyConverter:
    """`<dlkey:key>`: a row key as lowercase hex (`keys.to_text`), given to views as bytes."""

    regex = "[0-9a-f]{2,546}"

    def to_python(self, value: str) -> bytes:
        return keys.from_text(value)

    def to_url(self, value: bytes) -> str:
        return keys.to_text(value)
