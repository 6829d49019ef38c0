"""What every benchmark shares beyond the load tester's output (`loadtests.output`): its command
line, with a scale factor and a JSON file, and timing."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from loadtests import write_json


def parser(description: str, default_sf: float = 1.0) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--sf", type=float, default=default_sf, help=f"TPC-H scale factor (default {default_sf:g})")
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the figures as JSON")
    return p


def bench_main(
    argv: list[str] | None, doc: str, run: Any, report: Any, repeat: int, joins: bool = False, default_sf: float = 1.0
) -> None:
    """The command line of a benchmark that takes a scale factor, a number of timed runs and (with
    `joins`) where joins run: run, print the report, write the JSON figures."""
    p = parser(doc.splitlines()[0], default_sf)
    p.add_argument("--repeat", type=int, default=repeat, help=f"timed runs per query and system (default {repeat})")
    if joins:
        p.add_argument(
            "--joins", choices=("node", "spark"), default="node", help="where joins run (sql.joins; default node)"
        )
    args = p.parse_args(argv)
    figures = run(args.sf, args.repeat, args.joins) if joins else run(args.sf, args.repeat)
    report(figures)
    write_json(args.json, figures)


@contextmanager
def timed() -> Iterator[dict[str, float]]:
    """`with timed() as t: ...` then t["s"] holds the elapsed seconds."""
    box: dict[str, float] = {}
    started = time.perf_counter()
    try:
        yield box
    finally:
        box["s"] = time.perf_counter() - started


def mb(n: float) -> str:
    return f"{n / 1e6:,.1f}"


def median_seconds(work: Callable[[], Any], repeat: int, warm_up: int = 1) -> float:
    """The median wall-clock seconds of `repeat` runs of `work`, after `warm_up` runs not counted."""
    for _ in range(warm_up):
        work()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)
