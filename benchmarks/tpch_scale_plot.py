"""TPC-H time against scale factor, per system: the geometric mean of the 22 queries' best warm
times in each `bench_tpch` run given (one per scale factor, each with its peers run beside it),
drawn as a PNG with log axes, and printed as a table.

    python -m benchmarks.tpch_scale_plot docs/bench/tpch_sf1_colocated.json docs/bench/tpch_sf3_colocated.json \\
        --out docs/bench/tpch_scale.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from loadtests import print_table, pyplot, save_figure

SYSTEMS = {  # summary key -> label
    "geomean_ours_s": "ours (joins on the nodes where they can run)",
    "geomean_ours_spark_joins_s": "ours, every join on Spark",
    "geomean_spark_s": "plain Spark SQL over Parquet",
    "geomean_duckdb_s": "DuckDB (all cores)",
    "geomean_duckdb_1_thread_s": "DuckDB (one thread)",
}


def series(runs: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """label -> [(scale factor, geometric mean seconds)], by scale factor."""
    runs = sorted(runs, key=lambda run: run["sf"])
    return {
        label: [(run["sf"], run["summary"][key]) for run in runs if key in run["summary"]]
        for key, label in SYSTEMS.items()
        if any(key in run["summary"] for run in runs)
    }


def draw(runs: list[dict[str, Any]], out: Path) -> None:
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(9.5, 4.5))
    drawn = series(runs)
    for label, points in drawn.items():
        axes.plot([sf for sf, _ in points], [s for _, s in points], marker="o", label=label)
    axes.set_xscale("log")
    axes.set_yscale("log")
    scales = sorted({sf for points in drawn.values() for sf, _ in points})
    axes.set_xticks(scales, [f"{sf:g}" for sf in scales])
    axes.minorticks_off()
    axes.set_xlabel("TPC-H scale factor")
    axes.set_ylabel("geometric mean of the 22 queries, s")
    axes.set_title("TPC-H: time against scale, each point one run with its peers")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    save_figure(figure, out, "the plot")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path, help="bench_tpch --json files, one per scale factor")
    p.add_argument("--out", type=Path, required=True, help="the PNG to write")
    args = p.parse_args(argv)
    runs = [json.loads(path.read_text()) for path in args.runs]
    drawn = series(runs)
    scales = sorted({sf for points in drawn.values() for sf, _ in points})
    rows = [[label, *(f"{dict(points).get(sf, float('nan')):.3f}" for sf in scales)] for label, points in drawn.items()]
    print_table("TPC-H geometric mean, s", ["system", *(f"SF {sf:g}" for sf in scales)], rows)
    draw(runs, args.out)


if __name__ == "__main__":
    main()
