"""`cxg demo`: the main job on the embedded default.

Generates sample TPC-H data and loads it (in this process, as `storage.ingest` says) into the
nodes' data directories (`storage.data`, the ones `cxg up` serves afterwards), shows how it is stored, then
starts a local region as separate processes (the gateway with the region's balancer and
embedded Spark, one native node per directory) and sends it SQL over HTTP: Q1 on the nodes
alone, Q3 and Q5 with their joins on Spark, a query with named parameters and the plan of Q3;
shows the region's slots; and ends with a short load test of simulated users.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from pathlib import Path

import pyarrow as pa
from rich.table import Table as RichTable

from cxg.client_commands import show_status
from cxg.console import console
from cxg.data_dirs import add_data_option, stores_of
from cxg.load import ingest_engine, load_options, load_tpch
from cxg.storage_commands import cmd_tables, render_summary
from gateway import Client
from loadtests import Scenario, Simulator, Target, query, report, run_load, summarize, tpch_list, write_logs
from regions import Config, LocalRegion, interrupt_on_sigterm, load_config, stop_all
from storage import summarize as storage_summary

PARAMETERIZED = (
    "select o_orderpriority, count(*) as orders from orders "
    "where o_orderdate >= :since and o_orderdate < :until group by o_orderpriority order by o_orderpriority"
)


def cmd_demo(args: argparse.Namespace, config: Config) -> int:
    interrupt_on_sigterm()
    stores = stores_of(args, config)
    out = Path(args.out)
    where = ", ".join(str(s.root) for s in stores)
    console.rule(f"Loading TPC-H SF {args.sf:g} into {len(stores)} nodes: {where}")
    load_tpch(stores, args.sf, load_options(config), config, ingest_engine(config))
    console.rule("Tables")
    cmd_tables(argparse.Namespace(data=[str(s.root) for s in stores]), config)
    console.rule("How lineitem is stored on node-0")
    console.print(render_summary(storage_summary(stores[0].table("lineitem"))))
    problems = [p for store in stores for name in store.tables() for p in store.table(name).verify()]
    for problem in problems:
        console.print(f"[red]{problem}[/]")
    console.print(
        f"verified every block of {len(stores[0].tables())} tables on {len(stores)} nodes: {len(problems)} problem(s)"
    )
    stop_all()  # the region's gateway runs the region's Spark

    sets = [
        *args.set,
        'region.backend="native"',
        f"storage.data={json.dumps([str(s.root) for s in stores])}",
        "gateway.port=0",
        "region.first_port=0",
    ]
    config_args = (["--config", str(args.config)] if args.config else []) + [x for s in sets for x in ("--set", s)]
    region_config = load_config(args.config, sets)
    region = LocalRegion(region_config, config_args, out / "region")
    console.rule("Starting a local region: gateway + balancer + Spark, and one process per node")
    with console.status("starting the region"):
        url = region.start()
    try:
        client = Client(url)
        console.print(f"gateway at [bold]{url}[/], process output in {region.run_dir}")
        console.print(f"the gateway is starting Spark ({region_config.spark.master}) in the background for the joins")
        _show(client, "TPC-H Q1", query(1))
        _show(client, "TPC-H Q3", query(3), waiting="TPC-H Q3: the first join query waits for Spark to be ready")
        _show(client, "TPC-H Q5", query(5))
        _show(
            client,
            "orders per priority in 1995 (named parameters)",
            PARAMETERIZED,
            {"since": datetime.date(1995, 1, 1), "until": datetime.date(1996, 1, 1)},
        )
        console.rule("EXPLAIN of TPC-H Q3")
        for line in client.execute("EXPLAIN " + query(3)).table.column("plan").to_pylist():
            console.print(line, highlight=False, markup=False)
        console.rule("The region")
        show_status(client.cluster())
        console.rule(f"A short load test: {args.users} users, {args.queries} TPC-H queries (1..14, uniform)")
        scenario = Scenario(tpch_list(14), "random", total=args.queries, seed=1)
        run = run_load(Simulator([Target(1, url)], args.users, scenario), args.queries, "load test")
        summary = summarize(run.records, max(1, args.queries // 10))
        report(run, summary, "load test")
        paths = write_logs(run, summary, out / "loadtest", "cxg demo load test")
        console.print(f"logs and plots: {', '.join(str(p) for p in paths.values())}")
    finally:
        region.stop()
    console.print(f"The data stays in {where}: `cxg up` serves it (gateway at http://127.0.0.1:8080 by default).")
    return 1 if problems else 0


def _show(client: Client, title: str, sql: str, params: dict | None = None, waiting: str | None = None) -> None:
    started = time.perf_counter()
    with console.status(waiting or title):
        result = client.execute(sql, params)
    status = client.get(f"/v1/statements/{result.id}")
    where = ", ".join(status["nodes"]) or "the gateway"
    title = f"{title}: {(time.perf_counter() - started) * 1000:.0f} ms, {status['engine']} engine, slots on {where}"
    console.print(_render(title, result.table.slice(0, 10)))


def _render(title: str, table: pa.Table) -> RichTable:
    out = RichTable(*table.column_names, title=title, title_justify="left")
    for row in table.to_pylist():
        out.add_row(*(f"{v:,.4f}" if isinstance(v, float) else str(v) for v in row.values()))
    return out


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo", help="run the main job: TPC-H loaded with Spark, a local region queried over HTTP, a short load test"
    )
    p.add_argument("--sf", type=float, default=0.1, help="TPC-H scale factor (default 0.1)")
    add_data_option(p)
    p.add_argument(
        "--out", default="data/demo", help="the region's process output and the load test's logs (default data/demo)"
    )
    p.add_argument("--users", type=int, default=8, help="load test users (default 8)")
    p.add_argument("--queries", type=int, default=48, help="load test queries (default 48)")
    p.set_defaults(func=cmd_demo)
