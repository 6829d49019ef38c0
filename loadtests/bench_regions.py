"""Balancing between regions in simulation (seed 004 §5.2), beside the published Tables 5.7 and
5.8: queries finished per region with no balancing, the centralized and decentralized methods and
ours (idle-pull), each averaged over runs with different seeds, with the mean response time, the
queries run outside their region, and a PNG of the queries finished per hour.

    python -m loadtests.bench_regions [--seeds 3] [--weight printed] [--wan-delay 0]
                                      [--json PATH] [--plot PATH]

(`cxg simulate regions` is the same.) See regions/cross_simulation.py for the model.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from loadtests.common import console, print_table, pyplot, save_figure, write_json
from regions.balancing import METHODS, WEIGHTS
from regions.cross_simulation import Experiment, Outcome, run_methods

# seed 004, Table 5.7: queries processed "per day" per region (the counts of whole 3-day runs)
TABLE_5_7 = {
    "none": (7152, 7297, 7212),
    "centralized": (13130, 10369, 9387),
    "decentralized": (16812, 9314, 8845),
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seeds", type=int, default=3, help="runs per method, each with its own seed (default 3)")
    p.add_argument("--weight", choices=list(WEIGHTS), default="printed", help="the reading of W_r (default printed)")
    p.add_argument("--wan-delay", type=float, default=0.0, help="seconds each way between regions (default 0)")
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the figures as JSON")
    p.add_argument("--plot", type=Path, metavar="PATH", help="also draw the queries finished per hour as a PNG")


def figures(outcomes: dict[str, list[Outcome]], experiment: Experiment) -> dict[str, Any]:
    """Per method: the mean over runs of each region's count, gain over no balancing, mean
    response time (measured days), share of queries run elsewhere; the published beside."""
    regions = range(1, experiment.regions + 1)
    base = {r: statistics.fmean(o.finished[r] for o in outcomes["none"]) for r in regions}
    methods = {}
    for name, runs in outcomes.items():
        finished = {r: statistics.fmean(o.finished[r] for o in runs) for r in regions}
        measured = sum(sum(o.measured.values()) for o in runs)
        response = sum(o.response[r] * o.measured[r] for o in runs for r in regions) / measured
        methods[name] = {
            "finished": [finished[r] for r in regions],
            "total": sum(finished.values()),
            "per_measured_day": measured / len(runs) / (experiment.days - experiment.warm_up_days),
            "gain_pct": [100 * (finished[r] / base[r] - 1) for r in regions],
            "total_gain_pct": 100 * (sum(finished.values()) / sum(base.values()) - 1),
            "mean_response_s": response,
            "response_s": [statistics.fmean(o.response[r] for o in runs) for r in regions],
            "moved_pct": 100 * sum(o.moved for o in runs) / sum(sum(o.finished.values()) for o in runs),
            "busy_pct": 100 * statistics.fmean(o.busy for o in runs),
            "hourly": [
                [statistics.fmean(o.hourly[r][h] for o in runs) for h in range(experiment.days * 24)] for r in regions
            ],
        }
        if name in TABLE_5_7:
            published = TABLE_5_7[name]
            methods[name]["published"] = list(published)
            methods[name]["published_total"] = sum(published)
            methods[name]["published_gain_pct"] = [
                100 * (p / b - 1) for p, b in zip(published, TABLE_5_7["none"], strict=True)
            ]
            methods[name]["off_pct"] = [
                100 * (f / p - 1) for f, p in zip(methods[name]["finished"], published, strict=True)
            ]
    return {"experiment": experiment.__dict__, "methods": methods}


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
    result = figures(outcomes, experiment)
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


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(p)
    sys.exit(report(p.parse_args(argv)))


if __name__ == "__main__":
    main()
