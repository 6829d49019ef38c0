"""`cxg simulate regions`: balancing between regions in simulation (seed 004 §5.2), beside the
published tables (the same as `python -m loadtests.bench_regions`)."""

from __future__ import annotations

import argparse

from loadtests import bench_regions
from regions import Config


def register(sub: argparse._SubParsersAction) -> None:
    simulate = sub.add_parser("simulate", help="simulate published experiments").add_subparsers(
        dest="experiment", required=True
    )
    p = simulate.add_parser("regions", help="3 regions in different time zones under each balancing method")
    bench_regions.add_arguments(p)
    p.set_defaults(func=_regions)


def _regions(args: argparse.Namespace, config: Config) -> int:
    return bench_regions.report(args)
