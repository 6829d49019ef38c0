"""`cxg status`, `cxg query`, `cxg drain` and `cxg undrain`: clients of a running gateway, over its
HTTP API."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import pyarrow.csv as pacsv
from rich.table import Table as RichTable

from cxg.console import console, show_rows
from gateway import Client, GatewayError, json_rows
from gateway.statements import STATES
from regions import Config


def client_of(config: Config, url: str | None = None, token: str | None = None) -> Client:
    """A client of the configured region's gateway (its first token, its CA), or of `url`."""
    token = token or (config.gateway.tokens[0].token if config.gateway.tokens else None)
    return Client(url or config.gateway.url, token, ca=config.gateway.tls_ca or None)


def client_for(args: argparse.Namespace, config: Config, token: str | None = None) -> Client:
    """The gateway of `--url` with `--token`, else `token`, else the configuration's first token."""
    return client_of(config, args.url or os.environ.get("CXG_URL"), args.token or token)


def spark_line(spark: dict) -> str:
    """The region's Spark in one line: master, session, executors, a standalone master's workers."""
    line = f"spark: {spark['master']}, session {spark['state']}"
    if "executors" in spark:
        line += f", executors {spark['executors'] if spark['executors'] is not None else '-'}"
    if "workers" in spark:
        workers = spark["workers"]
        alive = sum(w["state"] == "ALIVE" for w in workers)
        shown = ", ".join(f"{w['host']} {w['state'].lower()} {w['coresused']}/{w['cores']} cores" for w in workers)
        line += f"; workers {alive} alive of {len(workers)}" + (f" ({shown})" if shown else "")
    elif "workers_error" in spark:
        line += f"; workers unknown ({spark['workers_error']})"
    return line


def show_status(doc: dict) -> None:
    counters = doc["counters"]
    draining = ", DRAINING: no new statements" if doc["draining"] else ""
    console.print(
        f"region {doc['region']} ({doc['backend']}{draining}): queue {doc['queue']}, in flight {doc['in_flight']}, "
        f"admitted {counters['admitted']}, completed {counters['completed']}, failed {counters['failed']}, "
        f"cancelled {counters['cancelled']}, rejected {counters['rejected']}"
    )
    console.print("gateway: " + ", ".join(f"{name} {version or '-'}" for name, version in doc["versions"].items()))
    if doc.get("spark"):
        console.print(spark_line(doc["spark"]), highlight=False)
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
                "draining" if node["draining"] else "yes" if node["ready"] else "refuse",
                str(node["tables"]),
            )
    console.print(table)


def show_regions(config: Config, token: str | None) -> None:
    """With several regions: one row per region, from its gateway (or why it did not answer)."""
    table = RichTable("region", "gateway", "queue", "in flight", "nodes", "slots", "draining", "spark")
    for peer in config.regions.values():
        try:
            doc = client_of(config, peer.url, token).cluster()
        except (GatewayError, ConnectionError, OSError) as e:
            table.add_row(peer.name, peer.url, "-", "-", "-", "-", "-", f"unreachable: {e}")
            continue
        nodes = [n for m in doc["members"] for n in m["nodes"]]
        spark = doc.get("spark") or {}
        table.add_row(
            peer.name,
            peer.url,
            str(doc["queue"]),
            str(doc["in_flight"]),
            str(len(nodes)),
            str(sum(n["slots"] for n in nodes)),
            "yes" if doc["draining"] else "no",
            f"{spark['master']} ({spark['state']})" if spark else "-",
        )
    console.print(table)


def show_statements(doc: dict) -> None:
    """The running and recent statements, newest first, with how far the running ones are."""
    table = RichTable("statement", "state", "token", "engine", "nodes", "progress", "rows", "ms", "sql")
    for s in doc["statements"]:
        p = s["progress"]
        progress = f"{p['subqueries_done']}/{p['subqueries']} sub-queries, {p['rows_scanned']:,} rows"
        if "node_stages" in p:
            progress += f", node stages {p['node_stages_done']}/{p['node_stages']}"
        if "spark_stages" in p:
            progress += f", Spark stages {p['spark_stages_done']}/{p['spark_stages']}"
        table.add_row(
            s["id"],
            s["state"] + (f" ({s['error']})" if s.get("error") else ""),
            s["token"] or "-",
            s["engine"] or "-",
            ",".join(s["nodes"]) or "-",
            progress,
            "-" if s["rows"] is None else f"{s['rows']:,}",
            f"{s['timings_ms'].get('total', 0):,.1f}",
            " ".join(s["sql"].split())[:40],
        )
    console.print(table, highlight=False)
    console.print(f"{len(doc['statements'])} of {doc['total']} statement(s)")


def cmd_status(args: argparse.Namespace, config: Config) -> int:
    if args.statements:
        doc = client_for(args, config).statements(args.state)
        if args.json:
            print(json.dumps(doc, indent=2))
        else:
            show_statements(doc)
        return 0
    doc = client_for(args, config).cluster()
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    if config.regions and not (args.url or os.environ.get("CXG_URL")):
        show_regions(config, args.token)
    show_status(doc)
    return 0


def cmd_drain(args: argparse.Namespace, config: Config) -> int:
    """Drain (`cxg drain`) or undrain (`cxg undrain`) the region or one node, with the cluster token
    when one is configured."""
    doc = client_for(args, config, config.gateway.cluster_token or None).drain(args.node, args.on)
    target = f"node {args.node}" if args.node else f"region {doc['region']}"
    if args.on:
        console.print(f"{target} drained: it takes no new query; what it runs or holds goes on to its end")
    else:
        console.print(f"{target} is back in rotation")
    draining = ", ".join(doc["draining_nodes"]) or "none"
    console.print(f"region {doc['region']}: {'draining' if doc['draining'] else 'open'}; nodes draining: {draining}")
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
    result = client_for(args, config).execute(sql, dict(args.param), tag=args.tag or None, max_rows=args.max_rows)
    seconds = time.perf_counter() - started
    table = result.table
    if args.format == "csv":
        pacsv.write_csv(table, sys.stdout.buffer)
    elif args.format == "json":
        print(json.dumps({"columns": table.column_names, "rows": json_rows(table)}))
    else:
        show_rows(table.column_names, zip(*(c.to_pylist() for c in table.columns), strict=True))
        note = ", truncated" if result.truncated else ""
        console.print(f"{table.num_rows} row(s) in {seconds:.3f} s (statement {result.id}{note})")
    return 0


def connection(p: argparse.ArgumentParser, token: str = "the first configured") -> None:
    p.add_argument("--url", help="the gateway (default: $CXG_URL, else gateway.host:gateway.port)")
    p.add_argument("--token", help=f"bearer token (default: {token}, or $CXG_TOKEN)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "status", help="show the region (and every region of a file of several): queue, nodes, slots, Spark, versions"
    )
    connection(p)
    p.add_argument("--json", action="store_true")
    p.add_argument("--statements", action="store_true", help="the running and recent statements, with their progress")
    p.add_argument("--state", choices=STATES, help="with --statements: only those in this state")
    p.set_defaults(func=cmd_status)

    for name, on, what in (("drain", True, "out of rotation"), ("undrain", False, "back into rotation")):
        p = sub.add_parser(
            name, help=f"take the region (or one node) {what}: running and queued queries finish either way"
        )
        p.add_argument("node", nargs="?", help="the node (default: the whole region)")
        connection(p, "gateway.cluster_token, else the first configured")
        p.set_defaults(func=cmd_drain, on=on)

    p = sub.add_parser("query", help="run one query through the gateway and print the result")
    p.add_argument("sql", help="the query, or - to read it from stdin")
    p.add_argument("--param", action="append", default=[], type=_param, metavar="NAME=VALUE", help="named parameter")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")
    p.add_argument("--tag", help="query label (simulation nodes pick their time by it)")
    p.add_argument("--max-rows", type=int)
    connection(p)
    p.set_defaults(func=cmd_query)
