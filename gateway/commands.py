"""`cxg gateway`, `cxg up`, `cxg status` and `cxg query`."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

from gateway.client import Client, GatewayError
from gateway.config import Config

console = Console()
errors = Console(stderr=True)


def _client(args: argparse.Namespace, config: Config) -> Client:
    url = args.url or f"http://{config.gateway.host}:{config.gateway.port}"
    token = args.token or (config.gateway.tokens[0].token if config.gateway.tokens else None)
    return Client(url, token)


def cmd_gateway(args: argparse.Namespace, config: Config) -> int:
    from balancer.service import serve
    from gateway.server import Gateway

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    g = config.gateway
    gateway = Gateway(config)
    auth = f"{len(g.tokens)} token(s)" if g.tokens else "no authentication"
    print(
        f"gateway: http://{g.host}:{g.port}, region {g.region} ({config.region.backend} nodes), {auth}",
        flush=True,
    )
    asyncio.run(serve(gateway.app(), g.host, g.port))
    return 0


def cmd_up(args: argparse.Namespace, config: Config) -> int:
    from regions.launcher import LocalRegion, interrupt_on_sigterm

    interrupt_on_sigterm()
    config_args = (["--config", str(args.config)] if args.config else []) + [x for s in args.set for x in ("--set", s)]
    region = LocalRegion(config, config_args, Path(args.run_dir) if args.run_dir else None)
    try:
        with console.status("starting the region"):
            url = region.start(timeout=args.timeout)
    except KeyboardInterrupt:
        return 130  # start() has stopped what it started
    console.print(f"region {config.gateway.region} is up at [bold]{url}[/] (process output in {region.run_dir})")
    show_status(Client(url, region._token()).cluster())
    console.print("Ctrl-C stops it")
    try:
        while (dead := region.dead()) is None:
            time.sleep(0.5)
        console.print(f"[red]{dead.name} exited[/]:\n{region.tail(dead)}")
        return 1
    except KeyboardInterrupt:
        console.print("stopping")
        return 0
    finally:
        region.stop()


def show_status(doc: dict) -> None:
    counters = doc["counters"]
    console.print(
        f"region {doc['region']} ({doc['backend']}): queue {doc['queue']}, in flight {doc['in_flight']}, "
        f"admitted {counters['admitted']}, completed {counters['completed']}, failed {counters['failed']}, "
        f"cancelled {counters['cancelled']}, rejected {counters['rejected']}"
    )
    table = RichTable("member", "role", "node", "slots", "running", "buffered", "ready", "tables")
    for member in doc["members"]:
        for node in member["nodes"]:
            table.add_row(
                member["name"],
                member["role"],
                node["name"],
                str(node["slots"]),
                str(node["running"]),
                str(node["buffered"]),
                "yes" if node["ready"] else "refuse",
                str(node["tables"]),
            )
    console.print(table)


def cmd_status(args: argparse.Namespace, config: Config) -> int:
    doc = _client(args, config).cluster()
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        show_status(doc)
    return 0


def _param(text: str) -> tuple[str, object]:
    name, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"--param wants name=value, got {text!r}")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value


def cmd_query(args: argparse.Namespace, config: Config) -> int:
    sql = args.sql if args.sql != "-" else sys.stdin.read()
    client = _client(args, config)
    started = time.perf_counter()
    try:
        result = client.execute(sql, dict(args.param), tag=args.tag or None, max_rows=args.max_rows)
    except GatewayError as e:
        errors.print(f"[red]error[/] {escape(f'[{e.code}]')} {escape(e.message)}")
        return 1
    seconds = time.perf_counter() - started
    table = result.table
    if args.format == "csv":
        import pyarrow.csv as pacsv

        pacsv.write_csv(table, sys.stdout.buffer)
    elif args.format == "json":
        from gateway.results import json_rows

        print(json.dumps({"columns": table.column_names, "rows": json_rows(table)}))
    else:
        view = RichTable(*table.column_names)
        for row in zip(*(c.to_pylist() for c in table.columns), strict=True):
            view.add_row(*("NULL" if v is None else str(v) for v in row))
        console.print(view)
        note = ", truncated" if result.truncated else ""
        console.print(f"{table.num_rows} row(s) in {seconds:.3f} s (statement {result.id}{note})")
    return 0


def _connection(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", help="the gateway (default: gateway.host:gateway.port, or $CXG_URL)")
    p.add_argument("--token", help="bearer token (default: the first configured, or $CXG_TOKEN)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gateway", help="run the gateway: SQL over HTTP and the region's balancer")
    p.set_defaults(func=cmd_gateway)

    p = sub.add_parser("up", help="start a local region: gateway, routers and nodes as processes; Ctrl-C stops it")
    p.add_argument("--run-dir", help="where the processes' output goes (default: a new temporary directory)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for all nodes to join")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("status", help="show the region: queue, nodes, slots")
    _connection(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("query", help="run one query through the gateway and print the result")
    p.add_argument("sql", help="the query, or - to read it from stdin")
    p.add_argument("--param", action="append", default=[], type=_param, metavar="NAME=VALUE", help="named parameter")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")
    p.add_argument("--tag", help="query label (simulation nodes pick their time by it)")
    p.add_argument("--max-rows", type=int)
    _connection(p)
    p.set_defaults(func=cmd_query)
