"""One table of SQL type names: every storage type is named in every dialect, and the names agree."""

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType
from sqlalchemy import types as sqltypes

from gateway.sqlalchemy_dialect import sqlalchemy_type
from storage import Column, by_sql_name, spark_schema, sql_name
from storage.mysql_load import column_type
from storage.sql_types import names_of


def parse_type(name: str) -> pa.DataType:
    return Column("c", name).arrow_type


# the catalog's column types, as docs/cli.md lists them
STORAGE_TYPES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "float32",
    "float64",
    "decimal(15,2)",
    "decimal(38,10)",
    "date",
    "timestamp(us)",
    "timestamp(ns, UTC)",
    "string",
    "large_string",
    "string_view",
]


@pytest.mark.parametrize("name", STORAGE_TYPES)
def test_every_storage_type_is_named_in_every_dialect(name):
    t = parse_type(name)
    names = names_of(t)
    assert names is not None and names.sql and names.mariadb and names.spark
    assert sql_name(t) == names.sql
    assert by_sql_name(names.sql).sqlalchemy == names.sqlalchemy  # a client reads it back as such
    assert not isinstance(sqlalchemy_type(names.sql), sqltypes.NullType)
    spark = StructType.fromJson({"type": "struct", "fields": [{"name": "c", "type": names.spark, "nullable": True}]})
    assert spark.fields[0].dataType.typeName() != "void"
    assert column_type(pa.chunked_array([pa.array([], t)]))


@pytest.mark.parametrize(
    ("arrow_type", "sql", "mariadb", "spark"),
    [
        (pa.int32(), "integer", "INT", "integer"),
        (pa.uint8(), "smallint", "SMALLINT", "short"),  # no unsigned types in SQL: widened
        (pa.uint16(), "integer", "INT", "integer"),
        (pa.uint32(), "bigint", "BIGINT", "long"),
        (pa.float32(), "real", "DOUBLE", "float"),
        (pa.decimal128(15, 2), "decimal(15,2)", "DECIMAL(15,2)", "decimal(15,2)"),
    ],
    ids=str,
)
def test_names_agree(arrow_type, sql, mariadb, spark):
    names = names_of(arrow_type)
    assert (names.sql, names.mariadb, names.spark) == (sql, mariadb, spark)


def test_spark_schema_is_pysparks_own_reading_of_arrow():
    signed = [n for n in STORAGE_TYPES if not n.startswith("uint") and n != "string_view"]
    schema = pa.schema([pa.field(f"c{i}", parse_type(n), nullable=i % 2 == 0) for i, n in enumerate(signed)])
    assert spark_schema(schema) == from_arrow_schema(schema)


def test_mariadb_strings_are_as_long_as_their_longest_value():
    assert column_type(pa.chunked_array([["ab", "abcde", None]])) == "VARCHAR(5)"
    assert column_type(pa.chunked_array([["x" * 1001]])) == "TEXT"


def test_the_api_names_unknown_types_as_arrow_does():
    assert sql_name(pa.list_(pa.int8())) == "list<item: int8>"
    assert isinstance(sqlalchemy_type("list<item: int8>"), sqltypes.NullType)
