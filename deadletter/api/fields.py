"""Serializer fields that take JSON's types as they are (DRF's own coerce
`12` to `"12"` and `"12"` to `12`), and the message's times and unknown keys."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from deadletter.wire import gotime, jsonvalues, keys
from deadletter.wire.gotime import GoTime

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def queue_name(value: str) -> str:
    """`value` when the queue accepts it as a name (1..255 UTF-8 bytes, no NUL); a
    `ValidationError` saying why otherwise: every serializer's queue field."""
    try:
        keys.encode_queue_name(value)
    except ValueError as exc:
        raise serializers.ValidationError(str(exc)) from None
    return value


@extend_schema_field({"type": "string"})
class TextField(serializers.Field):
    """A JSON string, taken as is: whitespace and every character kept."""

    default_error_messages = {"invalid": "Expected a string, got {kind}."}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid", kind=_kind(data))
        return data

    def to_representation(self, value: Any) -> str:
        return str(value)


NO_NUL = "^[^\\x00]*$"


@extend_schema_field(
    {"type": "string", "minLength": 1, "maxLength": keys.MAX_QUEUE_NAME_BYTES, "pattern": NO_NUL}
)
class QueueNameField(TextField):
    """A queue's name (1..255 UTF-8 bytes, no NUL: `queue_name`); the schema says
    as much as JSON Schema can (it counts characters, the queue bytes)."""

    def to_internal_value(self, data: Any) -> str:
        return queue_name(super().to_internal_value(data))


def query_data(request: Any) -> dict[str, str]:
    """The query string as a plain dict (the last value of a repeated name), so
    that a query serializer sees each parameter exactly as sent: DRF takes an
    empty value in a `QueryDict` for an absent one, which let `?reason=` or
    `?after=` through where the schema admits no empty string."""
    return dict(request.query_params.items())


@extend_schema_field({"type": "integer", "format": "int64"})
class Int64Field(serializers.Field):
    """A JSON integer (not a boolean, not a string) in Go's int64 range."""

    default_error_messages = {
        "invalid": "Expected an integer, got {kind}.",
        "range": f"Must be between {INT64_MIN} and {INT64_MAX}.",
    }

    def to_internal_value(self, data: Any) -> int:
        if type(data) is not int:
            self.fail("invalid", kind=_kind(data))
        if not INT64_MIN <= data <= INT64_MAX:
            self.fail("range")
        return int(data)

    def to_representation(self, value: Any) -> int:
        return int(value)


@extend_schema_field({"type": "string", "format": "date-time"})
class TimeField(serializers.Field):
    """RFC 3339 with up to nine fraction digits, read and written as Go does
    (`GoTime.parse`, `.format()`), so nanoseconds and the offset survive."""

    default_error_messages = {
        "invalid": "Expected an RFC 3339 time such as 2026-11-29T12:00:00.123456789Z, got {got}."
    }

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            self.fail("invalid", got=_kind(data))
        try:
            return GoTime.parse(data)
        except (ValueError, OverflowError, TypeError):
            self.fail("invalid", got=repr(data[:80]))

    def to_representation(self, value: Any) -> str:
        return format_time(value)


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": True,
        "description": "Keys of the message this app does not know, kept as they came. "
        "Values JSON cannot hold travel as one-key objects: "
        '{"$float": "NaN"}, {"$int": "<decimal>"}, {"$bytes": "<base64>"}, '
        '{"$map": [[k, v]]}, {"$tag": [n, v]}, {"$simple": n}, {"$undefined": null}, '
        '{"$repr": "<text>"} (read only).',
    }
)
class ExtraField(serializers.Field):
    """The unknown keys: an object of any values, in `jsonvalues`' JSON form."""

    default_error_messages = {
        "invalid": "Expected an object, got {kind}.",
        "value": "{name}: {problem}",
    }

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            self.fail("invalid", kind=_kind(data))
        extra: dict[str, Any] = {}
        for key, value in data.items():
            try:
                extra[key] = jsonvalues.from_json(value)
            except ValueError as exc:
                self.fail("value", name=repr(key), problem=str(exc))
        return extra

    def to_representation(self, value: Any) -> dict[str, Any]:
        return {str(k): jsonvalues.to_json(v) for k, v in value.items()}


KEY_PATTERN = f"^(?:[0-9a-f]{{2}}){{1,{keys.MAX_ADDRESSABLE_KEY_BYTES}}}$"


@extend_schema_field({"type": "string", "pattern": KEY_PATTERN})
class KeyField(serializers.Field):
    """A row key as lowercase hex, given to the code as bytes."""

    default_error_messages = {"invalid": "Not a key: expected lowercase hex of a row key."}

    def to_internal_value(self, data: Any) -> bytes:
        try:
            if isinstance(data, str) and data == data.lower():
                return keys.from_text(data)
        except ValueError:
            pass
        raise serializers.ValidationError(self.error_messages["invalid"], code="invalid")

    def to_representation(self, value: Any) -> str:
        return keys.to_text(value)


def format_time(value: Any) -> str:
    """Go's RFC3339Nano text of a message time; a time Go cannot write as RFC 3339
    (a year beyond 9999, read from a CBOR epoch) in ISO 8601's extended form."""
    try:
        return str(value.format())
    except (ValueError, OverflowError):
        return format_unix_ns(gotime.epoch_ns(value))


def format_unix_ns(ns: int) -> str:
    """RFC 3339 in UTC with the fraction's trailing zeros trimmed, as Go writes it."""
    seconds, fraction = divmod(ns, 1_000_000_000)
    try:
        text = datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    except (ValueError, OverflowError, OSError):
        return f"{ns}ns since 1970-01-01T00:00:00Z"
    if fraction:
        text += "." + f"{fraction:09d}".rstrip("0")
    return text + "Z"


def _kind(data: Any) -> str:
    if data is None:
        return "null"
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "an array",
        dict: "an object",
    }.get(type(data), type(data).__name__)
