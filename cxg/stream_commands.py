"""`cxg append` and `cxg watch`: rows appended to a table, and a standing query kept up to date on
the terminal, its changes printed as they are pushed (`docs/http-api.md`, Appends and Standing
queries)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from cxg.client_commands import client_for, connection
from cxg.console import cell, console, show_rows
from regions import Config
from storage import ConfigError

ARROW_SUFFIXES = (".arrow", ".arrows", ".ipc", ".feather")


def _rows(path: str) -> pa.Table | bytes:
    """What FILE holds: a Parquet or Arrow file read as a table; JSON lines (or stdin, `-`) as they are."""
    if path == "-":
        return sys.stdin.buffer.read()
    file = Path(path)
    if file.suffix == ".parquet":
        return pq.read_table(file)
    if file.suffix in ARROW_SUFFIXES:
        with pa.memory_map(str(file)) as source:
            try:
                return pa.ipc.open_file(source).read_all()
            except pa.ArrowInvalid:  # an IPC stream rather than a file
                source.seek(0)
                return pa.ipc.open_stream(source).read_all()
    return file.read_bytes()


def cmd_append(args: argparse.Namespace, config: Config) -> int:
    done = client_for(args, config).append(args.table, _rows(args.file))
    rows, table, version = done["rows"], done["table"], done["version"]
    console.print(
        f"appended {rows:,} row(s) to {table}: version {version} ({done['blocks']} block files)", highlight=False
    )
    return 0


def cmd_watch(args: argparse.Namespace, config: Config) -> int:
    """Print the standing query's result, then each change as it is pushed; a subscription it
    registered is deleted when it stops (Ctrl-C, or after `--updates`) unless `--keep`."""
    if (args.sql is None) == (args.id is None):
        raise ConfigError("cxg watch needs the standing query's SQL, or --id of one registered")
    client = client_for(args, config)
    key = args.id or client.subscribe(args.sql, args.event_time, args.every)["id"]
    if args.sql is not None and args.format == "table":
        console.print(f"subscription {key}: kept up to date as rows are appended", highlight=False)
    updates = 0
    try:
        for kind, event in client.updates(key):
            _show(kind, event, args.format)
            updates += kind == "update"
            if kind == "ended" or (args.updates is not None and updates >= args.updates):
                break
    finally:
        if args.sql is not None and not args.keep:
            client.unsubscribe(key)
    return 0


def _show(kind: str, event: dict, form: str) -> None:
    if form == "json":
        print(json.dumps({"event": kind, **event}), flush=True)
    elif kind == "snapshot":
        show_rows([c["name"] for c in event["columns"]], event["rows"])
        console.print(f"version {event['version']}: {len(event['rows'])} row(s)", highlight=False)
    elif kind == "update":
        late = f", {event['late_rows']} late row(s) waiting" if event.get("late_rows") else ""
        what = "consolidated" if event.get("consolidated") else "appended"
        console.print(
            f"version {event['version']} ({what}): {len(event['changed'])} row(s) changed, "
            f"{len(event['removed'])} group(s) removed{late}",
            highlight=False,
        )
        for row in event["changed"]:
            console.print("  " + " | ".join(cell(v) for v in row), highlight=False)
        for key in event["removed"]:
            console.print(f"  removed {key}", highlight=False)
    else:
        console.print(f"ended: {event.get('why', 'deleted')}", highlight=False)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("append", help="append rows to a table as its new version (JSON lines, Parquet or Arrow)")
    p.add_argument("table")
    p.add_argument("file", help="a .parquet or .arrow file, JSON lines, or - for JSON lines on stdin")
    connection(p)
    p.set_defaults(func=cmd_append)

    p = sub.add_parser("watch", help="register a standing query and print its changes as rows are appended")
    p.add_argument("sql", nargs="?", help="the standing query (aggregates kept up to date)")
    p.add_argument("--id", help="watch a subscription registered before instead (it is kept)")
    p.add_argument("--event-time", help="the column of the rows' event time (late rows wait for consolidation)")
    p.add_argument("--every", type=float, help="seconds between consolidations of late rows (default 60)")
    p.add_argument("--updates", type=int, help="stop after this many updates")
    p.add_argument("--keep", action="store_true", help="keep the subscription registered when it stops")
    p.add_argument("--format", choices=("table", "json"), default="table", help="json: one event per line")
    connection(p)
    p.set_defaults(func=cmd_watch)
