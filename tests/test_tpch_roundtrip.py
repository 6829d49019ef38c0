"""All 8 TPC-H tables at SF 0.01 decode to exactly what was loaded."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from storage import LoadOptions, Store, load_table, read_parquet
from storage.tpch import TABLES, schema_for

PRIMARY_KEYS = {
    "lineitem": ["l_orderkey", "l_linenumber"],
    "orders": ["o_orderkey"],
    "customer": ["c_custkey"],
    "part": ["p_partkey"],
    "partsupp": ["ps_partkey", "ps_suppkey"],
    "supplier": ["s_suppkey"],
    "nation": ["n_nationkey"],
    "region": ["r_regionkey"],
}


def comparable(table: pa.Table, keys: list[str]) -> pa.Table:
    """Sorted by primary key (pyarrow cannot reorder string_view, so compare those as string)."""
    plain = pa.schema([f.with_type(pa.string()) if pa.types.is_string_view(f.type) else f for f in table.schema])
    return table.cast(plain).sort_by([(k, "ascending") for k in keys])


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory, tpch_files: dict[str, Path]) -> Store:
    store = Store(tmp_path_factory.mktemp("tpch-store"))
    for name, path in tpch_files.items():
        source = read_parquet([path])
        load_table([store], schema_for(name, source.schema), source, LoadOptions(block_budget=1 << 20))
    return store


@pytest.mark.parametrize("name", list(TABLES))
def test_table_round_trips(loaded: Store, tpch_files: dict[str, Path], name: str) -> None:
    source = read_parquet([tpch_files[name]])
    decoded = loaded.table(name).to_arrow()
    assert decoded.schema.equals(source.schema), "same columns, types (string_view, decimal128) and nullability"
    assert comparable(decoded, PRIMARY_KEYS[name]).equals(comparable(source, PRIMARY_KEYS[name]))


def test_lineitem_is_compressed_with_runs_on_the_sort_key(loaded: Store) -> None:
    table = loaded.table("lineitem")
    blocks = table.blocks
    assert len(blocks) > 1
    for block in blocks:
        shipdate = block.columns["l_shipdate"]
        assert shipdate.runs == shipdate.distinct, "within a block the sort key forms one run per value"
    encoded = sum(c.encoded_bytes for b in blocks for c in b.columns.values())
    plain = sum(c.plain_bytes for b in blocks for c in b.columns.values())
    assert encoded * 4 < plain
