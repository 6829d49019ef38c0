"""`cxg simulate regions`: balancing between regions in simulation (seed 004 §5.2), beside the
published tables: a table, and on request the figures as JSON and a PNG of the queries finished per
hour (`python -m benchmarks.bench_regions` runs the same)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from loadtests import console, print_table, pyplot, save_figure, write_json
from regions import METHODS, WEIGHTS, Config, Experiment, method_figures, run_methods


def register(sub: argparse._SubParsersAction) -> None:
    simulate = sub.add_parser("simulate", help="simulate published experiments").add_subparsers(
        dest="experiment", required=True
    )
    p = simulate.add_parser("regions", help="3 regions in different time zones under each balancing method")
    add_arguments(p)
    p.set_defaults(func=_regions)


def _regions(args: argparse.Namespace, config: Config) -> int:
    return report(args)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seeds", type=int, default=3, help="runs per method, each with its own seed (default 3)")
    p.add_argument("--weight", choices=list(WEIGHTS), default="printed", help="the reading of W_r (default printed)")
    p.add_argument("--wan-delay", type=float, default=0.0, help="seconds each way between regions (default 0)")
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the figures as JSON")
    p.add_argument("--plot", type=Path, metavar="PATH", help="also draw the queries finished per hour as a PNG")


def print_report(result: dict[str, Any], title: str) -> None:
    rows = []
    for name, m in result["methods"].items():
        counts = " / ".join(f"{c:,.0f}" for c in m["finished"])
        published = " / ".join(f"{c:,}" for c in m["published"]) if "published" in m else "-"
        gains = " / ".join(f"{g:+.0f}" for g in m["gain_pct"]) if name != "none" else "-"
        published_gains = (
            " / ".join(f"{g:+.0f}" for g in m["published_gain_pct"]) if "published" in m and name != "none" else "-"
        )
        rows.append(
            (
                name,
                counts,
                f"{m['total']:,.0f}",
                published,
                f"{m['published_total']:,}" if "published" in m else "-",
                gains,
                published_gains,
                f"{m['total_gain_pct']:+.0f}" if name != "none" else "-",
                f"{m['mean_response_s']:.0f}",
                f"{m['moved_pct']:.0f}%",
                f"{m['busy_pct']:.0f}%",
            )
        )
    print_table(
        title,
        [
            "method",
            "finished, regions 1/2/3",
            "total",
            "Table 5.7",
            "published total",
            "gain % 1/2/3",
            "Table 5.8",
            "total gain %",
            "mean response s",
            "run elsewhere",
            "servers busy",
        ],
        rows,
    )


def plot_hourly(panels: dict[str, list[list[float]]], path: Path, xlabel: str) -> None:
    """One panel per method (its title -> per region, the queries finished in each model hour)."""
    fig, axes = pyplot().subplots(len(panels), 1, figsize=(9, 2.2 * len(panels)), sharex=True, sharey=True)
    for ax, (title, hourly) in zip(axes, panels.items(), strict=True):
        for r, series in enumerate(hourly, start=1):
            ax.plot(range(len(series)), series, label=f"region {r}")
        ax.set_title(title, fontsize=9)
        ax.set_ylabel("queries / h")
    axes[0].legend(fontsize=8, loc="upper right")
    axes[-1].set_xlabel(xlabel)
    save_figure(fig, path, "plot")


def plot(result: dict[str, Any], path: Path) -> None:
    panels = {
        f"{name}: {m['total']:,.0f} queries, mean response {m['mean_response_s']:.0f} s": m["hourly"]
        for name, m in result["methods"].items()
    }
    plot_hourly(panels, path, "model hours (days 1-2 warm-up, day 3 measured)")


def report(args: argparse.Namespace) -> int:
    experiment = Experiment(wan_delay=args.wan_delay)
    started = time.perf_counter()
    with console.status(f"simulating {len(METHODS)} methods x {args.seeds} runs of {experiment.days} model days"):
        outcomes = run_methods(experiment, list(METHODS), list(range(1, args.seeds + 1)), args.weight)
    result = method_figures(outcomes, experiment)
    result.update(seeds=args.seeds, weight=args.weight, wall_s=time.perf_counter() - started)
    print_report(
        result,
        f"Queries finished over {experiment.days} model days per origin region, mean of {args.seeds} runs "
        f"(W_r read as {args.weight}; {result['wall_s']:.0f} s)",
    )
    write_json(args.json, result)
    if args.plot:
        plot(result, args.plot)
    return 0
