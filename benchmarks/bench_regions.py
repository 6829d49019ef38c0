"""Balancing between regions in simulation (seed 004 §5.2), beside the published Tables 5.7 and
5.8: queries finished per region with no balancing, the centralized and decentralized methods and
ours (idle-pull), each averaged over runs with different seeds, with the mean response time, the
queries run outside their region, and a PNG of the queries finished per hour.

    python -m benchmarks.bench_regions [--seeds 3] [--weight printed] [--wan-delay 0]
                                       [--json PATH] [--plot PATH]

The command is `cxg simulate regions`'s (`cxg.simulate`), kept here beside the other benchmarks.
See regions/cross_simulation.py for the model, regions/cross_figures.py for the figures.
"""

from __future__ import annotations

import argparse
import sys

from cxg.simulate import add_arguments, report


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(p)
    sys.exit(report(p.parse_args(argv)))


if __name__ == "__main__":
    main()
