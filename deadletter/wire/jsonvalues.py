"""The JSON form of a message's unknown keys, which may hold any CBOR value.

JSON cannot hold every CBOR value, so those that do not fit travel as an
object with one key starting with `$` (docs/api.md lists them):

    {"$float": "NaN" | "Infinity" | "-Infinity"}   a non-finite float
    {"$int": "<decimal>"}                          an integer beyond ±(2**53 - 1), or a CBOR bignum
    {"$bytes": "<base64>"}                         a byte string
    {"$map": [[key, value], ...]}                  a map whose keys are not all text, or
                                                   one with a key starting with "$"
    {"$tag": [number, value]}                      any other CBOR tag
    {"$simple": n}                                 a CBOR simple value
    {"$undefined": null}                           CBOR's undefined
    {"$repr": "<text>"}                            anything else (read only)

`from_json` reads the same forms back, so a message read from the API and
parked again keeps its unknown keys' values as they were.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Mapping
from typing import Any

import cbor2

__all__ = ["from_json", "to_json"]

SAFE_INT = 2**53 - 1
MAX_DEPTH = 200
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def to_json(value: Any, depth: int = 0) -> Any:
    """`value` as plain JSON (finite numbers, text, lists, text-keyed objects)."""
    kind = type(value)
    if value is None or kind is str or kind is bool:
        return value
    if kind is int:
        return value if -SAFE_INT <= value <= SAFE_INT else {"$int": str(value)}
    if kind is float:
        if math.isfinite(value):
            return value
        return {
            "$float": "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        }
    if depth >= MAX_DEPTH:
        return {"$repr": "nested too deeply to show"}
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, list | tuple):
        return [to_json(item, depth + 1) for item in value]
    if isinstance(value, Mapping):
        if all(type(k) is str and not k.startswith("$") for k in value):
            return {k: to_json(v, depth + 1) for k, v in value.items()}
        return {"$map": [[to_json(k, depth + 1), to_json(v, depth + 1)] for k, v in value.items()]}
    if isinstance(value, cbor2.CBORTag):
        return _tag_json(value, depth)
    if isinstance(value, cbor2.CBORSimpleValue):
        return {"$simple": int(value.value)}
    if value is cbor2.undefined:
        return {"$undefined": None}
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return to_json(int(value), depth)
    if isinstance(value, float):
        return to_json(float(value), depth)
    if isinstance(value, str):
        return str(value)
    return {"$repr": _safe_repr(value)}


def _tag_json(tag: cbor2.CBORTag, depth: int) -> Any:
    number, inner = tag.tag, tag.value
    if number in (2, 3) and isinstance(inner, bytes):
        magnitude = int.from_bytes(inner, "big")
        return {"$int": str(magnitude if number == 2 else -1 - magnitude)}
    return {"$tag": [number, to_json(inner, depth + 1)]}


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)[:1000]
    except Exception:  # a value's repr may fail in any way; the page must not
        return f"<{type(value).__name__}>"


def from_json(value: Any, depth: int = 0) -> Any:
    """The value a JSON form stands for; `ValueError` naming what is wrong."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError('a non-finite float is written {"$float": "NaN"}')
        return value
    if depth >= MAX_DEPTH:
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, list):
        return [from_json(item, depth + 1) for item in value]
    if not isinstance(value, dict):
        raise ValueError(f"not a JSON value: {type(value).__name__}")
    marked = [k for k in value if k.startswith("$")]
    if not marked:
        return {k: from_json(v, depth + 1) for k, v in value.items()}
    if len(value) != 1:
        raise ValueError(
            f"keys starting with '$' mark a special value and stand alone: {marked[0]!r}; "
            'write such a map as {"$map": [[key, value], ...]}'
        )
    ((mark, inner),) = value.items()
    reader = _READERS.get(mark)
    if reader is None:
        raise ValueError(f"unknown special value {mark!r}; known: {', '.join(_READERS)}")
    return reader(inner, depth)


def _read_float(inner: Any, depth: int) -> float:
    if inner not in _NON_FINITE:
        raise ValueError('"$float" takes "NaN", "Infinity" or "-Infinity"')
    return _NON_FINITE[inner]


def _read_int(inner: Any, depth: int) -> int:
    text = inner if isinstance(inner, str) else ""
    digits = text[1:] if text[:1] == "-" else text
    if not digits.isascii() or not digits.isdigit() or len(digits) > 4300:
        raise ValueError('"$int" takes an integer written in decimal, as text')
    return int(text)


def _read_bytes(inner: Any, depth: int) -> bytes:
    if not isinstance(inner, str):
        raise ValueError('"$bytes" takes base64 text')
    try:
        return base64.b64decode(inner.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise ValueError('"$bytes" takes base64 text') from None


def _read_map(inner: Any, depth: int) -> dict[Any, Any]:
    if not isinstance(inner, list) or not all(
        isinstance(pair, list) and len(pair) == 2 for pair in inner
    ):
        raise ValueError('"$map" takes a list of [key, value] pairs')
    result: dict[Any, Any] = {}
    for key, item in inner:
        read = from_json(key, depth + 1)
        if isinstance(read, list | dict) or (isinstance(read, float) and math.isnan(read)):
            raise ValueError('"$map" keys must be text, numbers, booleans, null or bytes')
        result[read] = from_json(item, depth + 1)
    return result


def _read_tag(inner: Any, depth: int) -> Any:
    if not (
        isinstance(inner, list)
        and len(inner) == 2
        and type(inner[0]) is int
        and 0 <= inner[0] < 2**64
    ):
        raise ValueError('"$tag" takes [tag number, value]')
    return cbor2.CBORTag(inner[0], from_json(inner[1], depth + 1))


def _read_simple(inner: Any, depth: int) -> Any:
    if type(inner) is not int or not (0 <= inner <= 19 or 32 <= inner <= 255):
        raise ValueError('"$simple" takes a simple value number: 0..19 or 32..255')
    return cbor2.CBORSimpleValue(inner)


def _read_undefined(inner: Any, depth: int) -> Any:
    if inner is not None:
        raise ValueError('"$undefined" takes null')
    return cbor2.undefined


def _read_repr(inner: Any, depth: int) -> Any:
    raise ValueError('"$repr" is only ever shown: the value it names cannot be written back')


_READERS = {
    "$float": _read_float,
    "$int": _read_int,
    "$bytes": _read_bytes,
    "$map": _read_map,
    "$tag": _read_tag,
    "$simple": _read_simple,
    "$undefined": _read_undefined,
    "$repr": _read_repr,
}
