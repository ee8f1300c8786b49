from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import connection

from deadletter.models import (
    ExactTextField,
    HexKeyField,
    NotNullIndex,
    QueuedMessage,
    StepsField,
)
from deadletter.wire import keys

pytestmark = pytest.mark.django_db(transaction=True)


def put(*names: str) -> list[bytes]:
    made = [keys.new_key(name) for name in names]
    QueuedMessage.objects.bulk_create(QueuedMessage(key=k, value=b"\x80") for k in made)
    return made


def test_a_queue_is_its_key_range_legacy_row_first() -> None:
    a1, b1, a2 = put("a", "b", "a")
    QueuedMessage.objects.create(key=b"a", value=b"\x80")
    assert [
        bytes(k)
        for k in QueuedMessage.objects.of_queue("a").order_by("key").values_list("key", flat=True)
    ] == [
        b"a",
        a1,
        a2,
    ]


def test_tail_key_is_the_newest_key_of_the_queue_or_none() -> None:
    first, _, last = put("q", "q", "q")
    put("r")
    assert QueuedMessage.objects.tail_key("q") == last
    assert QueuedMessage.objects.tail_key("empty") is None


def test_count_rows_counts_up_to_and_including_until() -> None:
    first, second, _ = put("q", "q", "q")
    assert QueuedMessage.objects.count_rows("q") == 3
    assert QueuedMessage.objects.count_rows("q", until=second) == 2


def test_these_reads_are_orm_statements_django_sees(django_assert_num_queries) -> None:
    put("q")
    with django_assert_num_queries(2):
        QueuedMessage.objects.tail_key("q")
        QueuedMessage.objects.count_rows("q")


def _index_definition(name: str) -> str:
    """How the database itself states the index `name` (MySQL/MariaDB: its columns)."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = %s", [name]
            )
        elif connection.vendor == "postgresql":
            cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [name])
        else:
            cursor.execute(
                "SELECT GROUP_CONCAT(column_name ORDER BY seq_in_index) FROM "
                "information_schema.statistics WHERE table_schema = DATABASE() "
                "AND index_name = %s",
                [name],
            )
        return str(cursor.fetchone()[0])


def test_the_signature_index_leaves_out_the_rows_without_one_where_the_backend_can() -> None:
    definition = _index_definition("deadletter_signature_key")
    if connection.features.supports_partial_indexes:
        bare = definition.translate(str.maketrans("", "", '"()'))
        assert bare.endswith("signature, key WHERE signature IS NOT NULL")
    else:
        assert definition == "signature,key"


def test_a_cause_is_still_found_by_the_signature_index() -> None:
    (key,) = put("q")
    QueuedMessage.objects.filter(key=key).update(signature="TimeoutError: late")
    rows = QueuedMessage.objects.filter(signature="TimeoutError: late").values_list(
        "key", flat=True
    )
    assert [bytes(k) for k in rows] == [key]
    if connection.vendor == "sqlite":
        plan = " ".join(str(row) for row in rows.explain().splitlines())
        assert "deadletter_signature_key" in plan


@pytest.mark.parametrize(
    "text",
    ["", "a", "ab cd", "0xab", "zz", "ab\n", "ab" * (keys.MAX_ADDRESSABLE_KEY_BYTES + 1)],
)
def test_the_key_field_refuses_the_text_keys_from_text_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="not a key in hex"):
        keys.from_text(text)
    with pytest.raises(ValidationError, match="not a key in hex"):
        HexKeyField().to_python(text)


def test_the_key_field_takes_key_text_in_either_case_up_to_the_limit() -> None:
    longest = "Ab" * keys.MAX_ADDRESSABLE_KEY_BYTES
    assert keys.from_text(longest) == bytes([0xAB]) * keys.MAX_ADDRESSABLE_KEY_BYTES
    assert HexKeyField().to_python(longest) == keys.from_text(longest)


def test_a_redrives_ramp_is_a_list_of_steps_kept_as_text() -> None:
    field = StepsField(max_length=200)
    assert field.get_prep_value([1, 5, 20]) == "1,5,20"
    assert field.to_python("1,5,20") == [1, 5, 20]
    assert field.to_python("") == []


def test_migrations_name_the_column_types_where_the_package_exports_them() -> None:
    """`deadletter.models.HexKeyField` in a migration, whichever module defines it."""
    index = NotNullIndex(fields=["signature", "key"], name="deadletter_signature_key")
    assert index.deconstruct()[0] == "deadletter.models.NotNullIndex"
    for field in [HexKeyField(), ExactTextField(max_length=8), StepsField(max_length=8)]:
        assert field.deconstruct()[1] == f"deadletter.models.{type(field).__name__}"
