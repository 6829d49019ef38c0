"""TPC-DS benchmark: the 99 queries on this engine, on plain Spark SQL over Parquet, and on DuckDB.

All in one run on the same data, as `benchmarks.bench_tpch` does it (`measure`): TPC-DS generated
offline by DuckDB's TPC-DS extension (`benchmarks.tpcds`), loaded into one storage node (a `cxg node`
process, CPU backend; each table placed by its size, as `cxg load` places it), the same Parquet
files read by plain Spark SQL in the same session, and DuckDB. Every answer of this engine is
checked against DuckDB's. Times are the best of `--repeat` warm runs.

    python -m benchmarks.bench_tpcds [--sf 1] [--json PATH] [--repeat 1] [--joins node|spark]
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from benchmarks import tpcds
from benchmarks.bench_tpch import first_runs, measure, summarize
from benchmarks.common import bench_main
from loadtests import console, print_table


def run(sf: float, repeat: int, joins: str = "node") -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cxg-bench-tpcds-") as tmp:
        work = Path(tmp)
        with console.status(f"generating TPC-DS SF {sf:g}"):
            files, queries = tpcds.generate(sf, work / "tpcds")
        measured = measure(work, files, queries, tpcds.schema_for, repeat, floor=False, joins=joins)
    summary = summarize(measured["queries"])
    summary["on_the_nodes_only"] = sum(r["engine"] == "nodes" for r in measured["queries"])
    return {"benchmark": "tpcds", "sf": sf, "joins": joins, **measured, "summary": summary}


def report(figures: dict[str, Any]) -> None:
    s = figures["summary"]
    faster = sorted(figures["queries"], key=lambda r: r["spark_s"] / r["ours_s"])
    rows = [
        [
            f"Q{r['query']}",
            r["engine"],
            f"{r['ours_s']:.3f}",
            f"{r['spark_s']:.3f}",
            f"{r['duckdb_s']:.3f}",
            f"{r['spark_s'] / r['ours_s']:.2f}x",
            "yes" if r["correct"] else "NO",
        ]
        for r in [*faster[:5], *faster[-5:]]
    ]
    rows.append(None)
    rows.append(
        [
            "geomean (99)",
            "",
            f"{s['geomean_ours_s']:.3f}",
            f"{s['geomean_spark_s']:.3f}",
            f"{s['geomean_duckdb_s']:.3f}",
            f"{s['speedup_vs_spark']:.2f}x",
            f"{s['correct']}/99",
        ]
    )
    print_table(
        f"TPC-DS SF {figures['sf']:g}, best of warm runs (the five slowest and five fastest against plain Spark)",
        ["query", "runs on", "ours s", "plain Spark s", "DuckDB s", "faster than Spark", "same answer"],
        rows,
    )
    console.print(
        f"geometric mean vs plain Spark: {s['speedup_vs_spark']:.2f}x; vs DuckDB: {s['ratio_to_duckdb']:.1f}x slower; "
        f"vs DuckDB on one thread: {s['ratio_to_duckdb_1_thread']:.2f}x; slower than plain Spark: "
        + (", ".join(f"Q{r['query']}" for r in figures["queries"] if r["spark_s"] < r["ours_s"]) or "none")
    )
    console.print(first_runs(s))


def main(argv: list[str] | None = None) -> None:
    bench_main(argv, __doc__, run, report, repeat=1, joins=True)


if __name__ == "__main__":
    main()
