"""`cxg demo`: the main job on the embedded default.

Generates sample TPC-H data, loads it into a local store, shows how it is stored, then starts a
storage node on loopback and runs the select-project and partial-aggregate parts of TPC-H Q1 and
Q6 through its HTTP API, merging the partial aggregates as a coordinator does.
"""

from __future__ import annotations

import argparse
import time

import pyarrow as pa
from rich.table import Table as RichTable

from gateway.background import serve
from gateway.config import Config
from gpu_kernels.aggregate import final_aggregate
from gpu_kernels.backend import get_backend
from loadtests.bench_scan import QUERIES
from storage import cli as storage_cli
from storage.loader import LoadOptions
from storage.node import Node
from storage.node_client import NodeClient
from storage.planner import PlannerOptions
from storage.scan import TableCache, plan_scan
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

    node = Node(store, get_backend(config.storage.backend), slots=None)
    with serve(node.app()) as url:
        console.rule(f"Scans on the compressed data through a storage node at {url}")
        client = NodeClient(url)
        schema = TableCache(store).get("lineitem").table.schema
        for name in ("Q1", "Q6"):
            request, _, keys = QUERIES[name]
            started = time.perf_counter()
            partials, stats = client.scan_table({"table": "lineitem", **request})
            plan = plan_scan({"table": "lineitem", **request}, schema)
            answer = final_aggregate(partials, keys, list(plan.task.aggregates))
            elapsed = time.perf_counter() - started
            console.print(_render(f"TPC-H {name} (select-project + partial aggregates)", answer, keys))
            console.print(
                f"{elapsed * 1000:.1f} ms on the {stats['backend']} backend: {stats['blocks']} blocks read, "
                f"{stats['blocks_skipped']} skipped by min/max, {stats['values_decoded']:,} values decoded, "
                f"{stats['runs_evaluated']:,} runs evaluated"
            )
    return 1 if problems else 0


def _render(title: str, table: pa.Table, keys: list[str]) -> RichTable:
    if keys:
        table = table.sort_by([(k, "ascending") for k in keys])
    out = RichTable(*table.column_names, title=title, title_justify="left")
    for row in table.to_pylist():
        out.add_row(*(f"{v:,.4f}" if isinstance(v, float) else str(v) for v in row.values()))
    return out


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the main job: sample TPC-H data, loaded, explained and scanned")
    p.add_argument("--sf", type=float, default=0.1, help="TPC-H scale factor (default 0.1)")
    p.add_argument("--data", default="data/demo", help="data directory (default data/demo)")
    p.set_defaults(func=cmd_demo)
