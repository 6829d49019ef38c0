import pyarrow as pa
import pytest

from gpu_kernels import UnsupportedTypeError, parse_type, type_name
from storage import Column, Placement, SchemaError, TableSchema
from storage.catalog import catalog_type_name

pytestmark = pytest.mark.check  # the fast lane (`make check`): no Spark, no server

TYPES = [
    pa.bool_(),
    pa.int8(),
    pa.int64(),
    pa.uint32(),
    pa.float32(),
    pa.date32(),
    pa.decimal128(15, 2),
    pa.decimal128(38, 10),
    pa.timestamp("ms"),
    pa.timestamp("us", tz="UTC"),
    pa.string(),
    pa.large_string(),
    pa.string_view(),
]


@pytest.mark.parametrize("arrow_type", TYPES, ids=str)
def test_type_names_round_trip(arrow_type: pa.DataType) -> None:
    assert parse_type(type_name(arrow_type)) == arrow_type


@pytest.mark.parametrize("arrow_type", [pa.list_(pa.int8()), pa.binary(), pa.uint64(), pa.date64()], ids=str)
def test_unsupported_types_are_named(arrow_type: pa.DataType) -> None:
    with pytest.raises(SchemaError, match=r"not supported|unsupported"):
        catalog_type_name(arrow_type)
    with pytest.raises(UnsupportedTypeError, match=r"not supported|unsupported"):
        type_name(arrow_type)


def test_schema_json_round_trip() -> None:
    schema = TableSchema(
        "t",
        (Column("k", "int64", False), Column("s", "string")),
        sort_key=("s",),
        placement=Placement.parse("hash(k)", 8).with_owners(["a", "b"]),
    )
    assert TableSchema.from_json(schema.to_json()) == schema
    assert schema.placement.owners == ("a", "b") * 4
    assert str(schema.placement) == "hash(k) x8"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: TableSchema("bad name", (Column("a", "int64"),)), "invalid table name"),
        (lambda: TableSchema("t", ()), "no columns"),
        (lambda: TableSchema("t", (Column("a", "int64"), Column("A", "int64"))), "two columns"),
        (lambda: TableSchema("t", (Column("a", "int64"),), sort_key=("b",)), "no column 'b'"),
        (lambda: TableSchema("t", (Column("a", "int64"),), placement=Placement.parse("hash(z)")), "no column 'z'"),
        (lambda: Column("a/b", "int64"), "invalid column name"),
        (lambda: Column("a", "decimal(50,2)"), "invalid decimal"),
        (lambda: Column("a", "blob"), "unknown column type"),
        (lambda: Placement.parse("range(a)"), "placement must be"),
        (lambda: Placement("hash", (), 4), "at least one key"),
        (lambda: Placement("hash", ("a",), 0), "bucket count"),
    ],
)
def test_invalid_definitions_are_refused_with_a_reason(make, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        make()
