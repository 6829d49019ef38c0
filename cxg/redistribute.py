"""`cxg redistribute`: tables copied or moved to another region, re-owned over a region's nodes (one
added or taken out), placed otherwise (replicated on every node, or hash-placed), or their buckets
moved from the busiest nodes to the idlest; each a Spark job with a progress bar, while the region
keeps answering (`regions.redistribution`)."""

from __future__ import annotations

import argparse
import time

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable

from cxg.client_commands import client_of
from cxg.console import console
from cxg.load import load_options, spark_tasks
from regions import (
    Config,
    RegionView,
    load_config,
    measure_costs,
    plan_copy,
    plan_nodes,
    plan_placement,
    plan_rebalance,
    retire_everywhere,
    run_move,
    spark_session,
    wait_served,
)
from storage import ConfigError, TableMove, row_costs


def _view(config: Config, name: str) -> RegionView:
    return RegionView.of(client_of(config), name or config.name)


def _plan(args: argparse.Namespace, config: Config, home: RegionView) -> tuple[RegionView, list[TableMove]]:
    """Where the tables go, and the moves that take them there."""
    if args.to:
        if args.to not in config.regions or args.to == config.name:
            others = ", ".join(n for n in config.regions if n != config.name) or "none"
            raise ConfigError(f"--to {args.to}: not another region of the configuration (others: {others})")
        target = _view(load_config(args.config, args.set, args.to), args.to)
        return target, [plan_copy(home, target, table) for table in args.tables]
    if args.nodes:
        nodes = [n.strip() for n in args.nodes.split(",") if n.strip()]
        return home, [plan_nodes(home, table, nodes) for table in args.tables]
    if args.placement:
        buckets = args.buckets or config.storage.buckets
        return home, [plan_placement(home, table, args.placement, buckets) for table in args.tables]
    if args.by == "rows":
        held: dict = {}
        for info in home.catalog.tables().values():
            if info.available and info.schema.placement.kind == "hash" and info.schema.placement.replicas == 1:
                for node, buckets in home.bucket_rows(info).items():
                    held.setdefault(node, {}).update(buckets)
        table_costs = row_costs(held)
    else:
        with console.status(f"measuring the load of region {home.name} for {args.window:g} s"):
            table_costs = measure_costs(home, args.window)
    _show_costs(table_costs)
    moves, bucket_moves = plan_rebalance(home, table_costs, args.threshold, args.tables or None)
    for move in bucket_moves:
        console.print(
            f"bucket {move.bucket} of {move.table}: {move.source} -> {move.target} (cost {move.cost:.3f})",
            highlight=False,
        )
    return home, moves


def _show_costs(table_costs: dict) -> None:
    table = RichTable("node", "buckets", "cost (share of its slots' time)")
    for node, buckets in sorted(table_costs.items()):
        table.add_row(node, str(sum(1 for c in buckets.values() if c > 0)), f"{sum(buckets.values()):.3f}")
    console.print(table)


def cmd_redistribute(args: argparse.Namespace, config: Config) -> int:
    chosen = [bool(args.to), bool(args.nodes), bool(args.placement), args.rebalance]
    if sum(chosen) != 1:
        raise ConfigError("cxg redistribute needs one of --to REGION, --nodes N,..., --placement P or --rebalance")
    if not args.tables and not args.rebalance:
        raise ConfigError("name the tables to move")
    if args.move and not args.to:
        raise ConfigError("--move goes with --to REGION")
    home = _view(config, config.name)
    target, moves = _plan(args, config, home)
    moves = [m for m in moves if m.copied or m.retire or not m.local]
    for move in moves:
        console.print(f"plan: {move}", highlight=False)
    if not moves:
        console.print("nothing to move")
        return 0
    if args.dry_run:
        return 0
    options = load_options(config)
    with console.status(f"starting Spark ({config.spark.master}) for the move"):
        spark = spark_session(config.spark)
    columns = (TextColumn("[bold]{task.description:<10}"), BarColumn(), MofNCompleteColumn(), TextColumn("Spark tasks"))
    with Progress(*columns, TimeElapsedColumn(), console=console) as progress:
        for move in moves:
            task = progress.add_task(move.table, total=None)
            started = time.perf_counter()
            with spark_tasks(spark, progress, task):
                ran = run_move(spark, move, home, target, options)
            served = wait_served(target, ran)
            progress.console.print(
                f"{move.table}: version {served['version']} served by region {target.name} on "
                f"{', '.join(served['nodes'])} ({served['rows']:,} rows, {move.copied} bucket copies, "
                f"{time.perf_counter() - started:.1f} s)",
                highlight=False,
            )
            if args.move:
                retired = retire_everywhere(home, move.table)
                progress.console.print(f"{move.table}: retired in region {home.name} on {', '.join(retired)}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "redistribute",
        help="copy or move tables to another region, re-own their buckets over a region's nodes, "
        "or move buckets from the busiest nodes to the idlest (Spark jobs; queries keep answering)",
    )
    p.add_argument("tables", nargs="*", metavar="TABLE", help="the tables (--rebalance: all hash-placed ones)")
    p.add_argument("--to", metavar="REGION", help="copy the tables to this region of the configuration")
    p.add_argument("--move", action="store_true", help="with --to: retire them here once the copy is served")
    p.add_argument("--nodes", metavar="N,...", help="re-own their buckets over these nodes of the region")
    p.add_argument(
        "--placement",
        metavar="P",
        help="place them otherwise: replicated (every node holds them whole) or hash(col, ...) over the nodes",
    )
    p.add_argument("--buckets", type=int, help="--placement hash(...): its buckets (default storage.buckets)")
    p.add_argument("--rebalance", action="store_true", help="move buckets from the busiest nodes to the idlest")
    p.add_argument(
        "--by", choices=("load", "rows"), default="load", help="--rebalance: scan time measured, or rows held"
    )
    p.add_argument("--window", type=float, default=10.0, help="--rebalance --by load: seconds of load measured")
    p.add_argument(
        "--threshold",
        type=float,
        default=0.05,
        help="--rebalance: the gap between the busiest and idlest node's cost that starts a move",
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan, move nothing")
    p.set_defaults(func=cmd_redistribute)
