"""TPC-H: data generation (tpchgen-cli) and the table definitions the product loads it with.

Sort keys are chosen so that runs form where queries filter and group (lineitem by ship date,
then the low-cardinality flags; orders by order date); fact tables are hash-placed on their
join keys, small dimensions replicated on every node. `cxg load tpch` keeps lineitem and orders
hash-placed on the order key whatever their size (CO_PARTITIONED): their joins then run on the nodes,
each over its own buckets, and only the other tables are placed by their size.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from storage.catalog import DEFAULT_BUCKETS, Placement, TableSchema
from storage.errors import StorageError

TABLES: dict[str, tuple[tuple[str, ...], str]] = {
    "lineitem": (
        ("l_shipdate", "l_returnflag", "l_linestatus", "l_shipmode", "l_shipinstruct"),
        "hash(l_orderkey)",
    ),
    "orders": (("o_orderdate", "o_orderstatus", "o_orderpriority"), "hash(o_orderkey)"),
    "customer": (("c_mktsegment", "c_nationkey"), "hash(c_custkey)"),
    "part": (("p_brand", "p_container"), "hash(p_partkey)"),
    "partsupp": (("ps_partkey", "ps_suppkey"), "hash(ps_partkey)"),
    "supplier": (("s_nationkey", "s_suppkey"), "replicated"),
    "nation": (("n_nationkey",), "replicated"),
    "region": (("r_regionkey",), "replicated"),
}


CO_PARTITIONED = ("lineitem", "orders")  # hash-placed on the order key whatever their size: joined on the nodes


def schema_for(name: str, arrow_schema: pa.Schema, buckets: int = DEFAULT_BUCKETS) -> TableSchema:
    sort_key, placement = TABLES[name]
    return TableSchema.from_arrow(name, arrow_schema, sort_key, Placement.parse(placement, buckets))


def _tpchgen() -> str:
    beside_python = Path(sys.executable).parent / "tpchgen-cli"
    found = str(beside_python) if beside_python.exists() else shutil.which("tpchgen-cli")
    if not found:
        raise StorageError("tpchgen-cli is not installed (pip install tpchgen-cli)")
    return found


def generate(scale_factor: float, out_dir: Path, tables: list[str] | None = None) -> dict[str, Path]:
    """Generate TPC-H tables as Parquet files in `out_dir`; returns table -> file."""
    tables = tables or list(TABLES)
    unknown = sorted(set(tables) - set(TABLES))
    if unknown:
        raise StorageError(f"unknown TPC-H table(s): {', '.join(unknown)}")
    if scale_factor <= 0:
        raise StorageError(f"scale factor must be positive, not {scale_factor}")
    out_dir.mkdir(parents=True, exist_ok=True)
    _run(scale_factor, out_dir, ["--tables", ",".join(tables)])
    return {t: out_dir / f"{t}.parquet" for t in tables}


def generate_part(table: str, scale_factor: float, parts: int, part: int) -> pa.Table | None:
    """Part `part` (1-based) of `parts` of one TPC-H table, as tpchgen-cli splits the work between
    machines (None: the part is empty, as every part but the first of nation and region)."""
    with tempfile.TemporaryDirectory(prefix="cxg-tpch-part-") as tmp:
        _run(scale_factor, Path(tmp), ["--tables", table, "--parts", str(parts), "--part", str(part)])
        files = sorted(Path(tmp).rglob("*.parquet"))
        return pq.read_table(files[0]) if files else None


def _run(scale_factor: float, out_dir: Path, args: list[str]) -> None:
    command = [_tpchgen(), "parquet", "-s", f"{scale_factor:g}", "--output-dir", str(out_dir), "--overwrite", *args]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise StorageError(f"tpchgen-cli failed: {result.stderr.strip() or result.stdout.strip()}")
