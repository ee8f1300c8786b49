"""The app's own column types: the binary row key (`HexKey`, `HexKeyField`), exact text,
a list of whole numbers, and an index of the rows whose first field is set."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper

from deadletter.wire import keys

# The longest key the app writes: a queue name of `MAX_QUEUE_NAME_BYTES`, a NUL,
# two 8-byte numbers. The column's bound on MySQL/MariaDB (`HexKeyField.db_type`).
KEY_BYTES = keys.MAX_QUEUE_NAME_BYTES + 17
# Where migrations import these classes from (`deadletter.models.HexKeyField`), as
# Django's own are `django.db.models.CharField`: the package, not this module.
EXPORTED_FROM = "deadletter.models"


def _exported(path: str) -> str:
    """A class path of this module as the package exports it."""
    return f"{EXPORTED_FROM}.{path.rpartition('.')[2]}"


class HexKey(bytes):
    """A row key read from the database: plain bytes whose text form is lowercase hex.

    Django's admin puts `str(pk)` into URLs, action checkboxes, log entries and
    confirmation forms; with this every one of them carries the hex that
    `HexKeyField.to_python` reads back, with no per-view override.
    """

    def __str__(self) -> str:
        return self.hex()


class HexKeyField(models.BinaryField):
    """A `BinaryField` whose text form is lowercase hex (`keys.to_text`), both ways.

    Text is read by `keys.from_text`, up to its generous limit: a row the Go
    program or an older release wrote with an unusual key must still open and delete.
    """

    def db_type(self, connection: BaseDatabaseWrapper) -> str | None:
        """`VARBINARY(max_length)` on MySQL/MariaDB, where Django's `LONGBLOB` cannot
        be a primary key; a binary string compares byte for byte, as the key order needs."""
        if connection.vendor == "mysql":
            return f"varbinary({self.max_length})"
        return super().db_type(connection)

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> HexKey | None:
        return None if value is None else HexKey(bytes(value))

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return HexKey(keys.from_text(value))
            except ValueError as exc:
                raise ValidationError(str(exc), code="invalid") from exc
        if isinstance(value, bytes | bytearray | memoryview):
            return HexKey(bytes(value))
        return value

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        if isinstance(value, str):
            return keys.from_text(value)
        if isinstance(value, bytearray | memoryview):
            return bytes(value)
        return value

    def value_to_string(self, obj: models.Model) -> str:
        value = self.value_from_object(obj)
        return "" if value is None else bytes(value).hex()  # type: ignore[call-overload]

    def deconstruct(self) -> Any:
        name, path, args, kwargs = super().deconstruct()
        return name, _exported(path), args, kwargs


class ExactTextField(models.CharField):
    """A `CharField` that compares byte for byte on every backend, as SQLite's and
    PostgreSQL's do: MySQL/MariaDB's default collations fold case and trailing
    spaces, which would merge two queue names or two causes into one."""

    def db_type(self, connection: BaseDatabaseWrapper) -> str | None:
        if connection.vendor == "mysql":
            return f"varchar({self.max_length}) CHARACTER SET utf8mb4"
        return super().db_type(connection)

    def db_parameters(self, connection: BaseDatabaseWrapper) -> dict[str, Any]:
        params = super().db_parameters(connection)
        if connection.vendor == "mysql" and not self.db_collation:
            mariadb = getattr(connection, "mysql_is_mariadb", False)
            params["collation"] = "utf8mb4_nopad_bin" if mariadb else "utf8mb4_0900_bin"
        return params

    def deconstruct(self) -> Any:
        name, path, args, kwargs = super().deconstruct()
        return name, _exported(path), args, kwargs


if TYPE_CHECKING:  # django-stubs: what the field takes and what it gives
    _StepsBase = models.CharField[Sequence[int] | str, list[int]]
else:
    _StepsBase = models.CharField


class StepsField(_StepsBase):
    """A list of whole numbers (a redrive's ramp, `[1, 5, 20]`) kept as the text
    `1,5,20`. Django's `JSONField` would have `manage.py check` ask each database
    whether it holds JSON, connecting to databases a check should not touch."""

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> list[int]:
        return self.to_python(value)

    def to_python(self, value: Any) -> list[int]:
        if value is None or value == "":
            return []
        if isinstance(value, str):
            try:
                return [int(part) for part in value.split(",")]
            except ValueError as exc:
                raise ValidationError(f"not a list of whole numbers: {value!r}") from exc
        return [int(part) for part in value]

    def get_prep_value(self, value: Any) -> Any:
        if isinstance(value, list | tuple):
            return ",".join(str(int(part)) for part in value)
        return super().get_prep_value(value)

    def value_to_string(self, obj: models.Model) -> str:
        steps: list[int] = self.to_python(self.value_from_object(obj))
        return ",".join(map(str, steps))

    def deconstruct(self) -> Any:
        name, path, args, kwargs = super().deconstruct()
        return name, _exported(path), args, kwargs


class NotNullIndex(models.Index):
    """An index of only the rows whose first field is set (`WHERE field IS NOT NULL`)
    where the backend has partial indexes (SQLite, PostgreSQL), so a row that
    leaves the field NULL costs no entry in it; the whole column on MySQL/MariaDB,
    which has none (and with no warning that a condition is ignored: there is none)."""

    def create_sql(
        self, model: type[models.Model], schema_editor: Any, using: str = "", **kwargs: Any
    ) -> Any:
        if not schema_editor.connection.features.supports_partial_indexes:
            return super().create_sql(model, schema_editor, using, **kwargs)
        partial = copy.copy(self)
        partial.condition = models.Q(**{f"{self.fields[0]}__isnull": False})
        return models.Index.create_sql(partial, model, schema_editor, using, **kwargs)

    def deconstruct(self) -> Any:
        path, args, kwargs = super().deconstruct()
        return _exported(path), args, kwargs
