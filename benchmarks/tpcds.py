"""TPC-DS for tests and benchmarks: its 24 tables and 99 queries, generated offline by DuckDB's TPC-DS
extension, and the table definitions the product loads them with.

The extension's registry wheels exist for DuckDB 1.5.5, not for the DuckDB 2.0 the project uses as
its reference, so the generator (`GENERATOR`, pinned) is installed once from the package index into
a directory of its own (`CACHE`) and runs in a subprocess that writes Parquet files and the queries'
texts. The reference answers come from the project's DuckDB over those files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from storage import Placement, TableSchema

GENERATOR = ("duckdb==1.5.5", "duckdb-extension-tpcds==1.5.5")
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "cxg" / "tpcds-duckdb-1.5.5"
# fact tables hash-placed on an item key (their joins with item and with each other), the rest replicated
FACTS = {
    "store_sales": "ss_item_sk",
    "store_returns": "sr_item_sk",
    "catalog_sales": "cs_item_sk",
    "catalog_returns": "cr_item_sk",
    "web_sales": "ws_item_sk",
    "web_returns": "wr_item_sk",
    "inventory": "inv_item_sk",
}
_SCRIPT = """
import duckdb, json, pathlib, sys
out, sf = pathlib.Path(sys.argv[1]), float(sys.argv[2])
extension = next(pathlib.Path(sys.argv[3]).rglob("tpcds.duckdb_extension"))
con = duckdb.connect()
con.execute(f"LOAD '{extension}'")
con.execute(f"CALL dsdgen(sf={sf})")
tables = [row[0] for row in con.execute("SHOW TABLES").fetchall()]
for table in tables:
    con.execute(f"COPY {table} TO '{out / (table + '.parquet')}' (FORMAT parquet)")
queries = {n: q for n, q in con.execute("SELECT query_nr, query FROM tpcds_queries()").fetchall()}
(out / "queries.json").write_text(json.dumps({"tables": tables, "queries": queries}))
"""


def _generator() -> Path:
    """The directory the generator is installed in (installed on first use)."""
    if not (CACHE / "duckdb_extension_tpcds").exists():
        command = [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(CACHE), *GENERATOR]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"installing the TPC-DS generator failed: {done.stderr.strip()[-2000:]}")
    return CACHE


def generate(scale_factor: float, out_dir: Path) -> tuple[dict[str, Path], dict[int, str]]:
    """The TPC-DS tables at `scale_factor` as Parquet files in `out_dir` (table -> file) and the 99
    queries (number -> text)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    generator = _generator()
    environment = {**os.environ, "PYTHONPATH": str(generator)}
    command = [sys.executable, "-c", _SCRIPT, str(out_dir), f"{scale_factor:g}", str(generator)]
    done = subprocess.run(command, capture_output=True, text=True, env=environment)
    if done.returncode != 0:
        raise RuntimeError(f"generating TPC-DS failed: {done.stderr.strip()[-2000:]}")
    listed = json.loads((out_dir / "queries.json").read_text())
    files = {table: out_dir / f"{table}.parquet" for table in listed["tables"]}
    return files, {int(n): text for n, text in listed["queries"].items()}


def schema_for(name: str, arrow_schema: pa.Schema) -> TableSchema:
    placement = f"hash({FACTS[name]})" if name in FACTS else "replicated"
    return TableSchema.from_arrow(name, arrow_schema, (), Placement.parse(placement, 16))
