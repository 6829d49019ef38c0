"""The `cxg` command line and the demo: the top floor.

Each command composes packages from every floor below (storage loads, the gateway and its
balancer, the region's processes and Spark, the load tests), so the command line lives above
them all and nothing below imports it (see docs/cli.md).
"""

import os

from storage.memory_budget import ALLOCATOR_ENVIRONMENT

for _name, _value in ALLOCATOR_ENVIRONMENT.items():  # before anything loads pyarrow
    os.environ.setdefault(_name, _value)

from cxg.cli import build_parser, main  # noqa: E402

__all__ = ["build_parser", "main"]
