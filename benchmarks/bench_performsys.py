"""The dissertation's PerformSys tables reproduced on simulation-mode nodes, with the speedup
curves as a PNG.

Table 4.1: 50 users, 1..7 nodes of 8 slots. Table 4.2: 200 users, 1..6 routers of 3 nodes of
8 slots. Both: 1000 queries uniform over the 14 TPC-H query times of Table 5.5 (5 GB), the
first and last 100 answers excluded; T, M and σ in simulated minutes next to the published ones.
See benchmarks/performsys.py for the setup.

    python -m benchmarks.bench_performsys [--json PATH] [--plot PATH] [--time-scale 0.05]
                                          [--tables 4.1,4.2] [--dispatch round-robin]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.performsys import TABLE_4_1, TABLE_4_2, Setup, run_setup
from loadtests import console, print_table, pyplot, save_figure, write_json


def run_table(name: str, setups: list[Setup], published: dict[int, tuple[float, float, float]]) -> list[dict[str, Any]]:
    rows = []
    for setup in setups:
        key = setup.routers or setup.nodes
        started = time.perf_counter()
        outcome = run_setup(setup)
        m, t, sigma = published[key]
        rows.append(
            {
                "table": name,
                "nodes": setup.nodes,
                "routers": setup.routers,
                "users": setup.users,
                "T_min": outcome.T,
                "M_min": outcome.M,
                "sigma_min": outcome.sigma,
                "published_T_min": t,
                "published_M_min": m,
                "published_sigma_min": sigma,
                "errors": outcome.summary.overall.errors + outcome.summary.overall.rejections,
                "overhead_ms": outcome.nominal_overhead_ms(),
                "wall_s": time.perf_counter() - started,
            }
        )
        console.print(
            f"  Table {name}, {setup.nodes} nodes / {setup.routers} routers: T {outcome.T:.2f} min, "
            f"M {outcome.M:.3f} min, σ {outcome.sigma:.3f} min ({rows[-1]['wall_s']:.0f} s)"
        )
    for r in rows:
        r["speedup"] = rows[0]["T_min"] / r["T_min"]
        r["published_speedup"] = rows[0]["published_T_min"] / r["published_T_min"]
    return rows


def print_rows(name: str, rows: list[dict[str, Any]], key: str, title: str) -> None:
    print_table(
        title,
        [key, "T", "M", "σ", "speedup", "beyond execution, ms/query"],
        [
            [
                r[key],
                f"{r['T_min']:.2f} | {r['published_T_min']:.2f}",
                f"{r['M_min']:.3f} | {r['published_M_min']:.3f}",
                f"{r['sigma_min']:.3f} | {r['published_sigma_min']:.3f}",
                f"{r['speedup']:.2f} | {r['published_speedup']:.2f}",
                f"{r['overhead_ms']:.1f}",
            ]
            for r in rows
        ],
    )


def plot(figures: dict[str, Any], path: Path) -> None:
    panels = [(k, v) for k, v in (("4.1", figures.get("table_4_1")), ("4.2", figures.get("table_4_2"))) if v]
    figure, axes = pyplot().subplots(1, len(panels), figsize=(6 * len(panels), 4.5), squeeze=False)
    for ax, (name, rows) in zip(axes[0], panels, strict=True):
        key = "nodes" if name == "4.1" else "routers"
        x = [r[key] for r in rows]
        ax.plot(x, [r["speedup"] for r in rows], "o-", label="this system (simulated nodes)")
        ax.plot(x, [r["published_speedup"] for r in rows], "s--", label="published (seed 004)")
        ax.plot(x, [v / x[0] for v in x], ":", color="gray", label="linear")
        ax.set_xlabel(f"{key} ({'8 slots each' if name == '4.1' else '3 nodes x 8 slots each'})")
        ax.set_ylabel("speedup T(1) / T(n)")
        ax.set_title(f"Table {name}: {rows[0]['users']} users, 1000 queries")
        ax.legend()
        ax.grid(alpha=0.3)
    save_figure(figure, path, "speedup curves")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sf", type=float, default=0, help="not used: simulated nodes hold no data")
    p.add_argument("--json", type=Path)
    p.add_argument("--plot", type=Path, default=Path("docs/bench/performsys_speedup.png"))
    p.add_argument("--time-scale", type=float, default=0.05, help="real seconds per simulated second")
    p.add_argument("--tables", default="4.1,4.2")
    p.add_argument("--dispatch", choices=("round-robin", "free-slot-first"), default="round-robin")
    args = p.parse_args(argv)
    tables = {t.strip() for t in args.tables.split(",")}
    figures: dict[str, Any] = {"time_scale": args.time_scale, "dispatch": args.dispatch}
    common = {"time_scale": args.time_scale, "dispatch": args.dispatch}
    if "4.1" in tables:
        console.print("[bold]Table 4.1[/]: 50 users, 1..7 nodes of 8 slots")
        setups = [Setup(nodes=n, users=50, **common) for n in TABLE_4_1]
        figures["table_4_1"] = run_table("4.1", setups, TABLE_4_1)
        print_rows("4.1", figures["table_4_1"], "nodes", "Table 4.1 (minutes, ours | published)")
    if "4.2" in tables:
        console.print("[bold]Table 4.2[/]: 200 users, 1..6 routers of 3 nodes of 8 slots")
        setups = [Setup(nodes=3 * r, routers=r, users=200, **common) for r in TABLE_4_2]
        figures["table_4_2"] = run_table("4.2", setups, TABLE_4_2)
        print_rows("4.2", figures["table_4_2"], "routers", "Table 4.2 (minutes, ours | published)")
    plot(figures, args.plot)
    write_json(args.json, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
