"""`cxg config defaults`: the whole default configuration as commented TOML, written from the
sections' classes (`regions.defaults_toml`), so that a file can start from it and
docs/configuration.md can be checked against it."""

from __future__ import annotations

import argparse

from regions import Config, defaults_toml


def register(sub: argparse._SubParsersAction) -> None:
    config = sub.add_parser("config", help="the configuration").add_subparsers(dest="what", required=True)
    p = config.add_parser("defaults", help="print every option at its default, commented, as TOML")
    p.set_defaults(func=_defaults)


def _defaults(args: argparse.Namespace, config: Config) -> int:
    print(defaults_toml(), end="")
    return 0
