"""TPC-DS benchmark: the 99 queries on this engine, on plain Spark SQL over Parquet, and on DuckDB.

All in one run on the same data, as `loadtests.bench_tpch` does it (`measure`): TPC-DS generated
offline by DuckDB's TPC-DS extension (`loadtests.tpcds`), loaded into one storage node (a `cxg node`
process, CPU backend), the same Parquet files read by plain Spark SQL in the same session, and
DuckDB. Every answer of this engine is checked against DuckDB's. Times are the best of `--repeat`
warm runs.

    python -m loadtests.bench_tpcds [--sf 1] [--json PATH] [--repeat 1]
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from loadtests import tpcds
from loadtests.bench_tpch import geomean, measure
from loadtests.common import console, parser, print_table, write_json


def run(sf: float, repeat: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cxg-bench-tpcds-") as tmp:
        work = Path(tmp)
        with console.status(f"generating TPC-DS SF {sf:g}"):
            files, queries = tpcds.generate(sf, work / "tpcds")
        results, spark_settings, load_s = measure(work, files, queries, tpcds.schema_for, repeat, floor=False)
    summary = {
        "geomean_ours_s": geomean([r["ours_s"] for r in results]),
        "geomean_spark_s": geomean([r["spark_s"] for r in results]),
        "geomean_duckdb_s": geomean([r["duckdb_s"] for r in results]),
        "correct": sum(r["correct"] for r in results),
        "on_the_nodes_only": sum(r["engine"] == "nodes" for r in results),
    }
    summary["speedup_vs_spark"] = summary["geomean_spark_s"] / summary["geomean_ours_s"]
    summary["ratio_to_duckdb"] = summary["geomean_ours_s"] / summary["geomean_duckdb_s"]
    return {
        "benchmark": "tpcds",
        "sf": sf,
        "load_s": load_s,
        "spark": spark_settings,
        "queries": results,
        "summary": summary,
    }


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
        f"geometric mean vs plain Spark: {s['speedup_vs_spark']:.2f}x; vs DuckDB: {s['ratio_to_duckdb']:.1f}x slower"
    )


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=1, help="timed runs per query and system (default 1)")
    args = p.parse_args(argv)
    figures = run(args.sf, args.repeat)
    report(figures)
    write_json(args.json, figures)


if __name__ == "__main__":
    main()
