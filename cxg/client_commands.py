"""`cxg status` and `cxg query`: clients of a running gateway, over its HTTP API."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import pyarrow.csv as pacsv
from rich.table import Table as RichTable

from cxg.console import console
from gateway import Client, Config, json_rows


def client_of(config: Config, url: str | None = None, token: str | None = None) -> Client:
    """A client of the configured region's gateway (its first token, its CA), or of `url`."""
    token = token or (config.gateway.tokens[0].token if config.gateway.tokens else None)
    return Client(url or config.gateway.url, token, ca=config.gateway.tls_ca or None)


def _client(args: argparse.Namespace, config: Config) -> Client:
    return client_of(config, args.url or os.environ.get("CXG_URL"), args.token)


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
    """Print the result; a refused or failed query is a GatewayError, reported by `cxg.cli`."""
    sql = args.sql if args.sql != "-" else sys.stdin.read()
    started = time.perf_counter()
    result = _client(args, config).execute(sql, dict(args.param), tag=args.tag or None, max_rows=args.max_rows)
    seconds = time.perf_counter() - started
    table = result.table
    if args.format == "csv":
        pacsv.write_csv(table, sys.stdout.buffer)
    elif args.format == "json":
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
    p.add_argument("--url", help="the gateway (default: $CXG_URL, else gateway.host:gateway.port)")
    p.add_argument("--token", help="bearer token (default: the first configured, or $CXG_TOKEN)")


def register(sub: argparse._SubParsersAction) -> None:
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
