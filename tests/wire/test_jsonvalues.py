"""Every value a message's unknown keys can hold has a JSON form, is shown by
the API without an error, and reads back from that form to the same CBOR."""

from __future__ import annotations

import json
import math
from typing import Any

import cbor2
import pytest
from django.contrib.auth.models import User
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from deadletter.wire import codec, keys
from deadletter.wire.jsonvalues import from_json, to_json
from tests.factories import insert, raw_sql

API = "/api/deadletter"

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64 - 1),
    st.integers(min_value=-(2**200), max_value=2**200),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.binary(max_size=20),
    st.just(cbor2.undefined),
    st.sampled_from([0, 5, 19, 32, 99, 255]).map(cbor2.CBORSimpleValue),
)
map_keys = st.one_of(st.text(max_size=8), st.integers(-1000, 1000), st.binary(max_size=4))


def values(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(map_keys, inner, max_size=4),
            st.builds(
                cbor2.CBORTag, st.integers(6, 2**32).filter(lambda t: t not in (2, 3)), inner
            ),
        ),
        max_leaves=12,
    )


def strict_json(value: Any) -> str:
    return json.dumps(value, allow_nan=False)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (math.nan, {"$float": "NaN"}),
        (-math.inf, {"$float": "-Infinity"}),
        (2**53, {"$int": str(2**53)}),
        (2**53 - 1, 2**53 - 1),
        (b"\x00\x01", {"$bytes": "AAE="}),
        ({1: "a"}, {"$map": [[1, "a"]]}),
        ({"$x": 1}, {"$map": [["$x", 1]]}),
        (cbor2.CBORTag(2, b"\x01\x00"), {"$int": "256"}),
        (cbor2.CBORTag(3, b"\x01\x00"), {"$int": "-257"}),
        (cbor2.CBORTag(1234, [1]), {"$tag": [1234, [1]]}),
        (cbor2.undefined, {"$undefined": None}),
        (cbor2.CBORSimpleValue(7), {"$simple": 7}),
        (frozenset({1}), {"$repr": "frozenset({1})"}),
    ],
)
def test_values_json_cannot_hold_have_a_one_key_form(value: Any, shown: Any) -> None:
    assert to_json(value) == shown


@given(values(scalars))
def test_every_value_renders_as_strict_json_and_reads_back_to_the_same_cbor(value: Any) -> None:
    shown = to_json(value)
    strict_json(shown)
    assert cbor2.dumps(from_json(json.loads(strict_json(shown)))) == cbor2.dumps(value)


@pytest.mark.parametrize(
    "bad",
    [
        {"$float": "nan"},
        {"$int": "1e3"},
        {"$bytes": "***"},
        {"$map": [[[1], 2]]},
        {"$tag": ["1", 2]},
        {"$simple": 24},
        {"$undefined": 0},
        {"$repr": "x"},
        {"$what": 1},
        {"$int": "1", "other": 2},
    ],
)
def test_a_malformed_form_is_refused_with_a_reason(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"\S"):
        from_json(bad)


@pytest.mark.django_db(transaction=True)
@settings(
    max_examples=150 * settings.default.max_examples // 100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(value=values(scalars))
def test_any_stored_value_reads_through_the_api_without_a_server_error(value: Any) -> None:
    """A row as another writer may have stored it: any CBOR in an unknown key."""
    client = APIClient()
    user, _ = User.objects.get_or_create(username="root", is_superuser=True)
    client.force_authenticate(user)
    key = keys.new_key("values")
    row = cbor2.dumps([{"Subject": "s", "Value": value}])
    insert(key, row)
    try:
        for path in (
            f"{API}/messages/{key.hex()}/",
            f"{API}/queues/values/messages/",
            f"{API}/queues/",
        ):
            response = client.get(path)
            assert response.status_code < 500
            strict_json(json.loads(response.content))
        shown = client.get(f"{API}/messages/{key.hex()}/").json()
        if not shown["corrupt"]:
            extra = shown["messages"][0]["extra"]
            if "Value" in extra:
                assert extra["Value"] == to_json(value)
            else:  # a value cbor2 cannot hold (a map keyed by a number): kept as bytes
                assert codec.decode(row)[0].raw_entries == (
                    cbor2.dumps("Value") + cbor2.dumps(value),
                )
    finally:
        with connection.cursor() as cursor:
            cursor.execute(raw_sql("DELETE FROM {table} WHERE {key} = %s"), (key,))
