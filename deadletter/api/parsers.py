"""The API's one request parser: a bounded, strict JSON object."""

from __future__ import annotations

import json
from typing import Any

from rest_framework import exceptions
from rest_framework.parsers import BaseParser

from deadletter.api.serializers import max_message_bytes

__all__ = ["BoundedJSONParser", "ParsedBody"]


class ParsedBody(dict[str, Any]):
    """A JSON object the parser read from a body (an empty body gives none)."""


class BoundedJSONParser(BaseParser):
    """JSON only, strictly (no NaN), and no more than `DEADLETTER_MAX_MESSAGE_BYTES`:
    bad bodies are a 400 naming `payload`, before anything is stored."""

    media_type = "application/json"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        limit = max_message_bytes()
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise exceptions.ValidationError(
                {"payload": [f"the body is over {limit} bytes (DEADLETTER_MAX_MESSAGE_BYTES)"]}
            )
        try:
            value = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise exceptions.ValidationError({"payload": [f"malformed JSON: {exc}"]}) from None
        if not isinstance(value, dict):
            raise exceptions.ValidationError(
                {"payload": [f"expected a JSON object, got {type(value).__name__}"]}
            )
        return ParsedBody(value)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
