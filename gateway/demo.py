"""`cxg demo`: the main job on the embedded default.

Generates sample TPC-H data and loads it with the Spark ingest pipeline, shows how it is stored,
then starts a storage node on loopback and runs TPC-H queries through the SQL engine: Q1 on the
node alone (partial aggregates, reduce/final), Q3 and Q5 with their joins on the embedded Spark,
and the plan of Q3.
"""

from __future__ import annotations

import argparse

import pyarrow as pa
from rich.table import Table as RichTable

from gateway.background import serve
from gateway.config import Config
from gateway.sql.engine import Engine
from gpu_kernels.backend import get_backend
from loadtests.tpch_queries import query
from storage import cli as storage_cli
from storage.loader import LoadOptions
from storage.node import Node
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
    storage_cli.load_tpch(
        [store], args.sf, options, config.storage.buckets, engine=config.storage.ingest, config=config
    )
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
        console.rule(f"SQL through a storage node at {url} and Spark ({config.spark.master})")
        engine = Engine({store.node: url}, config.spark.settings())
        for number in (1, 3, 5):
            result = engine.execute(query(number))
            title = f"TPC-H Q{number}: {result.seconds * 1000:.0f} ms, on the {result.engine}"
            console.print(_render(title, result.table.slice(0, 10)))
        console.rule("EXPLAIN of TPC-H Q3")
        for line in engine.execute("EXPLAIN " + query(3)).table.column("plan").to_pylist():
            console.print(line, highlight=False, markup=False)
    return 1 if problems else 0


def _render(title: str, table: pa.Table) -> RichTable:
    out = RichTable(*table.column_names, title=title, title_justify="left")
    for row in table.to_pylist():
        out.add_row(*(f"{v:,.4f}" if isinstance(v, float) else str(v) for v in row.values()))
    return out


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the main job: sample TPC-H data loaded with Spark, explained and queried")
    p.add_argument("--sf", type=float, default=0.1, help="TPC-H scale factor (default 0.1)")
    p.add_argument("--data", default="data/demo", help="data directory (default data/demo)")
    p.set_defaults(func=cmd_demo)
