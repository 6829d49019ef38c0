"""The `cxg` command line and the demo: the top floor.

Each command composes packages from every floor below (storage loads, the gateway and its
balancer, the region's processes and Spark, the load tests), so the command line lives above
them all and nothing below imports it (see docs/cli.md).
"""

from cxg.cli import build_parser, main

__all__ = ["build_parser", "main"]
