"""`cxg demo`: the main job on the embedded default.

Generates sample TPC-H data, loads it into a local store and shows how it is stored.
"""

from __future__ import annotations

import argparse

from gateway.config import Config
from storage import cli as storage_cli
from storage.loader import LoadOptions
from storage.planner import PlannerOptions
from storage.stats import summarize
from storage.store import Store


def cmd_demo(args: argparse.Namespace, config: Config) -> int:
    console = storage_cli.console
    store = Store(args.data, node="node-0")
    options = LoadOptions(
        block_budget=config.storage.block_budget,
        compression=config.storage.compression,
        planner=PlannerOptions(allow_zstd=config.storage.zstd_strings),
    )
    console.rule(f"Loading TPC-H SF {args.sf:g} into {store.root}")
    storage_cli.load_tpch([store], args.sf, options, config.storage.buckets)
    console.rule("Tables")
    storage_cli.cmd_tables(argparse.Namespace(data=[args.data]), config)
    console.rule("How lineitem is stored")
    console.print(storage_cli.render_summary(summarize(store.table("lineitem"))))
    problems = [p for name in store.tables() for p in store.table(name).verify()]
    for problem in problems:
        console.print(f"[red]{problem}[/]")
    console.print(f"verified every block of {len(store.tables())} tables: {len(problems)} problem(s)")
    return 1 if problems else 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the main job: sample TPC-H data, loaded and explained")
    p.add_argument("--sf", type=float, default=0.1, help="TPC-H scale factor (default 0.1)")
    p.add_argument("--data", default="data/demo", help="data directory (default data/demo)")
    p.set_defaults(func=cmd_demo)
