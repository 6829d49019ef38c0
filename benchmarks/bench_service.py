"""Service path benchmark: what a one-table query costs on its way through the SQL engine to a node,
beside the steps it is made of, side by side in one run.

On lineitem (a node of this process on loopback, the NumPy backend), TPC-H Q6 and Q6 over a date
range that holds no row (its blocks pruned by their min/max: the fixed cost alone), each asked
again and again as an application does, so each system works from what it kept of it: the node's
scan in this process (`scan_table`, its plan kept as a node keeps a small request's), the same
scan through `NodeClient` over HTTP, the SQL through `Engine.execute` (its check and plan kept;
the scan over HTTP, finished here), and DuckDB over the same rows in this process as a prepared
statement (`EXECUTE`: planned once); and the floor, a node's `GET /healthz` through `NodeClient`.
Every answer through the engine is checked against DuckDB's. Medians of `--repeat` runs, in ms.

    python -m benchmarks.bench_service [--sf 0.01] [--repeat 300] [--json PATH]
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb

from benchmarks.bench_scan import QUERIES
from benchmarks.common import bench_main, median_seconds
from benchmarks.compare import rows, rows_match
from gateway.background import serve
from gateway.sql.engine import Engine
from gpu_kernels import get_backend
from loadtests import console, print_table, query
from storage import (
    LoadOptions,
    Node,
    NodeClient,
    ScanRequest,
    Store,
    TableCache,
    load_table,
    read_parquet,
    scan_table,
    tpch,
)


def _a_century_early(text: str) -> str:
    """Q6's year, 1994, as 1900: before any row's date."""
    return text.replace("1994-01-01", "1900-01-01").replace("1995-01-01", "1901-01-01")


CASES = {  # name -> the scan request, the SQL
    "Q6, no row": (json.loads(_a_century_early(json.dumps(QUERIES["Q6"][0]))), _a_century_early(query(6))),
    "Q6": (QUERIES["Q6"][0], query(6)),
}
PATHS = ("in_process", "node_client", "engine", "duckdb")


def _median_ms(work: Callable[[], Any], repeat: int) -> float:
    """The median of `repeat` timed runs of `work` in ms, after a tenth of them (at least one) not counted."""
    return median_seconds(work, repeat, max(1, repeat // 10)) * 1000


def run(sf: float, repeat: int) -> dict[str, Any]:
    figures: dict[str, Any] = {"benchmark": "service", "sf": sf, "repeat": repeat, "queries": {}}
    with tempfile.TemporaryDirectory(prefix="cxg-bench-service-") as tmp:
        with console.status(f"generating and loading TPC-H lineitem at SF {sf:g}"):
            files = tpch.generate(sf, Path(tmp) / "tpch", ["lineitem"])
            source = read_parquet([files["lineitem"]])
            store = Store(Path(tmp) / "node")
            load_table([store], tpch.schema_for("lineitem", source.schema), source, LoadOptions())
        con = duckdb.connect()
        con.register("source", source)
        con.execute("CREATE TABLE lineitem AS SELECT * FROM source")
        cache, numpy = TableCache(store), get_backend("numpy")
        with serve(Node(store, numpy, slots=2).app()) as url, console.status("timing"):
            client = NodeClient(url)
            engine = Engine({store.node: url}, spark=lambda: None)
            figures["floor_ms"] = _median_ms(lambda: client.get("/healthz"), repeat)
            for i, (name, (request, sql)) in enumerate(CASES.items()):
                scan = {"table": "lineitem", **request}
                typed = ScanRequest.from_json(scan)
                con.execute(f"PREPARE q{i} AS {sql}")
                got, expected = engine.execute(sql), con.execute(f"EXECUTE q{i}").fetchall()
                if got.engine != "nodes" or not rows_match(rows(got.table), expected, ordered=True):
                    raise SystemExit(f"{name}: the engine answers {rows(got.table)}, DuckDB {expected}")

                def in_process(t: ScanRequest = typed) -> list:
                    return list(scan_table(cache, t, numpy, kept=True).pieces())

                figures["queries"][name] = {
                    "in_process": _median_ms(in_process, repeat),
                    "node_client": _median_ms(lambda s=scan: client.scan_table(s), repeat),
                    "engine": _median_ms(lambda q=sql: engine.execute(q), repeat),
                    "duckdb": _median_ms(lambda i=i: con.execute(f"EXECUTE q{i}").fetchall(), repeat),
                }
    return figures


def report(figures: dict[str, Any]) -> None:
    print_table(
        f"A one-table query's path, lineitem SF {figures['sf']:g}, ms (median of {figures['repeat']}); "
        f"the floor, a node's GET /healthz: {figures['floor_ms']:.2f} ms",
        ["query", "node's scan, in process", "the scan over HTTP", "SQL through the engine", "DuckDB, prepared"],
        [[name, *(f"{q[path]:.2f}" for path in PATHS)] for name, q in figures["queries"].items()],
    )


def main(argv: list[str] | None = None) -> None:
    bench_main(argv, __doc__, run, report, repeat=300, default_sf=0.01)


if __name__ == "__main__":
    main()
