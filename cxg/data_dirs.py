"""The nodes' data directories that `cxg load`, `cxg storage`, `cxg up` and `cxg demo` agree on:
`--data DIR` (repeated, one per node) when given, else the configuration's `storage.data`."""

from __future__ import annotations

import argparse

from regions import Config
from storage import Store


def data_dirs(args: argparse.Namespace, config: Config) -> list[str]:
    return args.data or config.storage.data


def stores_of(args: argparse.Namespace, config: Config) -> list[Store]:
    """One store per data directory, named node-0, node-1, ... as `cxg up` names their nodes."""
    return [Store(d, node=f"node-{i}") for i, d in enumerate(data_dirs(args, config))]


def add_data_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data",
        action="append",
        metavar="DIR",
        help="node data directory, repeat for several nodes (default: storage.data, data/node-0 and data/node-1)",
    )
