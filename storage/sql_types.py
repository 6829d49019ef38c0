"""The SQL name of every column type, in each dialect that names one: one table, so that the
gateway's answers, its `/v1/tables`, the planner's schema, the MariaDB loader, Spark and the
SQLAlchemy dialect cannot disagree about a type.

The `sql` names are the ones the HTTP API shows (`bigint`, `varchar`, `decimal(15,2)`); the
planner reads them in DuckDB's dialect, which knows them all. SQL has no unsigned integers, so an
unsigned type gets the smallest signed type that holds all its values in every dialect (`uint8`
is a `smallint`: a `tinyint` would overflow at 128).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class TypeNames:
    """One type's names; `{precision}` and `{scale}` stand for a decimal's."""

    sql: str  # the HTTP API's column types, the planner's schema (DuckDB dialect)
    mariadb: str | None  # the DDL of the mysql loader (None: MariaDB has no such column)
    spark: str  # Spark's name in a JSON schema (`StructType.fromJson`)
    sqlalchemy: str  # the SQLAlchemy generic type a client reflects it as

    def formatted(self, precision: int, scale: int) -> TypeNames:
        def fill(name: str | None) -> str | None:
            return name.format(precision=precision, scale=scale) if name else name

        return TypeNames(fill(self.sql), fill(self.mariadb), fill(self.spark), self.sqlalchemy)


_BOOLEAN = TypeNames("boolean", "BOOLEAN", "boolean", "Boolean")
_TINYINT = TypeNames("tinyint", "TINYINT", "byte", "SmallInteger")
_SMALLINT = TypeNames("smallint", "SMALLINT", "short", "SmallInteger")
_INTEGER = TypeNames("integer", "INT", "integer", "Integer")
_BIGINT = TypeNames("bigint", "BIGINT", "long", "BigInteger")
_DECIMAL = TypeNames(
    "decimal({precision},{scale})", "DECIMAL({precision},{scale})", "decimal({precision},{scale})", "Numeric"
)
# MariaDB: a FLOAT column answers its values rounded to 6 digits; DOUBLE keeps float32 exact
_REAL = TypeNames("real", "DOUBLE", "float", "Float")
_DOUBLE = TypeNames("double", "DOUBLE", "double", "Float")
_DATE = TypeNames("date", "DATE", "date", "Date")
# Spark: a timestamp without a time zone is TIMESTAMP_NTZ, as PySpark reads it from Arrow
_TIMESTAMP = TypeNames("timestamp", "DATETIME(6)", "timestamp_ntz", "DateTime")
_TIMESTAMP_TZ = TypeNames("timestamp", "DATETIME(6)", "timestamp", "DateTime")
# MariaDB: TEXT in general; the loader narrows it to VARCHAR(n) for short strings
_VARCHAR = TypeNames("varchar", "TEXT", "string", "String")
_VARBINARY = TypeNames("varbinary", "LONGBLOB", "binary", "LargeBinary")
_NULL = TypeNames("null", None, "void", "NullType")

_BY_ARROW: dict[pa.DataType, TypeNames] = {
    pa.bool_(): _BOOLEAN,
    pa.int8(): _TINYINT,
    pa.int16(): _SMALLINT,
    pa.int32(): _INTEGER,
    pa.int64(): _BIGINT,
    pa.uint8(): _SMALLINT,
    pa.uint16(): _INTEGER,
    pa.uint32(): _BIGINT,
    pa.float32(): _REAL,
    pa.float64(): _DOUBLE,
    pa.date32(): _DATE,
    pa.string(): _VARCHAR,
    pa.large_string(): _VARCHAR,
    pa.string_view(): _VARCHAR,
    pa.binary(): _VARBINARY,
    pa.large_binary(): _VARBINARY,
    pa.null(): _NULL,
}
_UINT64 = _DECIMAL.formatted(20, 0)
_BY_SQL = {names.sql: names for names in (*_BY_ARROW.values(), _TIMESTAMP)}
_DECIMAL_NAME = re.compile(r"decimal\((\d+),(\d+)\)")


def names_of(t: pa.DataType) -> TypeNames | None:
    """The names of an Arrow type; None for types no dialect here names (lists, structs...)."""
    if pa.types.is_decimal(t):
        return _DECIMAL.formatted(t.precision, t.scale)
    if pa.types.is_timestamp(t):
        return _TIMESTAMP_TZ if t.tz else _TIMESTAMP
    if pa.types.is_uint64(t):
        return _UINT64
    return _BY_ARROW.get(t)


def sql_name(t: pa.DataType) -> str:
    """The SQL name of an Arrow type, as the API's `columns` show it (Arrow's own name for a type
    SQL has none for)."""
    names = names_of(t)
    return names.sql if names is not None else str(t)


def by_sql_name(name: str) -> TypeNames | None:
    """The names of the type the API calls `name`, as a client reads it back."""
    if m := _DECIMAL_NAME.fullmatch(name):
        return _DECIMAL.formatted(int(m[1]), int(m[2]))
    return _BY_SQL.get(name)
