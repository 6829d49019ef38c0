"""`cxg storage ...`: how the nodes' tables are stored (tables, per-column encodings, checksums,
first rows), read straight from their data directories."""

from __future__ import annotations

import argparse

from rich.table import Table as RichTable

from cxg.console import console, show_rows
from cxg.data_dirs import add_data_option, stores_of
from regions import Config
from storage import CHAIN_PREFERENCE, TableSummary, format_size, summarize


def render_summary(summary: TableSummary) -> RichTable:
    title = (
        f"{summary.name}: {summary.rows:,} rows in {summary.blocks} blocks of RC={summary.block_rows:,} rows "
        f"(BS={format_size(summary.budget_bytes)}, RS={summary.record_bytes} B), {summary.placement}, "
        f"sorted by ({', '.join(summary.sort_key)}), version {summary.version}"
    )
    table = RichTable(title=title, title_justify="left")
    headers = (
        "column",
        "type",
        "chain (blocks)",
        "sorted",
        "runs",
        "distinct/block",
        "nulls",
        "encoded",
        "plain Arrow",
    )
    for header in headers:
        table.add_column(header, justify="left" if header in ("column", "type", "chain (blocks)") else "right")
    table.add_column("ratio", justify="right")
    for c in summary.columns:
        table.add_row(
            c.name,
            c.type,
            c.chain,
            f"{c.sorted_blocks}/{summary.blocks}",
            f"{c.runs:,}",
            f"{c.max_distinct:,}",
            f"{c.null_count:,}",
            format_size(c.encoded_bytes),
            format_size(c.plain_bytes),
            f"{c.ratio:.1f}x",
        )
    ratio = summary.plain_bytes / summary.encoded_bytes if summary.encoded_bytes else 0
    table.add_section()
    table.add_row(
        "total",
        "",
        f"on disk {format_size(summary.disk_bytes)}",
        "",
        "",
        "",
        "",
        format_size(summary.encoded_bytes),
        format_size(summary.plain_bytes),
        f"{ratio:.1f}x",
    )
    return table


def render_candidates(summary: TableSummary) -> RichTable:
    """Every candidate chain's size per column (summed over blocks); the encoding choice kept the smallest per block."""
    chains = sorted({chain for c in summary.columns for chain in c.candidates}, key=CHAIN_PREFERENCE.index)
    table = RichTable("column", *chains, title="candidate sizes (smallest per block is chosen)", title_justify="left")
    for c in summary.columns:
        smallest = min(c.candidates.values(), default=None)
        cells = []
        for chain in chains:
            size = c.candidates.get(chain)
            text = "" if size is None else format_size(size)
            cells.append(f"[bold green]{text}[/]" if size is not None and size == smallest else text)
        table.add_row(c.name, *cells)
    return table


def cmd_stats(args: argparse.Namespace, config: Config) -> int:
    for store in stores_of(args, config):
        summary = summarize(store.table(args.table))
        console.print(render_summary(summary))
        if args.candidates:
            console.print(render_candidates(summary))
    return 0


def cmd_tables(args: argparse.Namespace, config: Config) -> int:
    table = RichTable("node", "table", "rows", "blocks", "placement", "encoded", "on disk", "version")
    for store in stores_of(args, config):
        for name in store.tables():
            s = summarize(store.table(name))
            table.add_row(
                store.node,
                name,
                f"{s.rows:,}",
                str(s.blocks),
                s.placement,
                format_size(s.encoded_bytes),
                format_size(s.disk_bytes),
                str(s.version),
            )
    console.print(table)
    return 0


def cmd_verify(args: argparse.Namespace, config: Config) -> int:
    problems = 0
    for store in stores_of(args, config):
        for name in args.tables or store.tables():
            table = store.table(name)
            found = table.verify()
            problems += len(found)
            for message in found:
                console.print(f"[red]{message}[/]")
            if not found:
                console.print(f"{store.node} {name}: {len(table.blocks)} blocks ok")
    return 1 if problems else 0


def cmd_head(args: argparse.Namespace, config: Config) -> int:
    store = stores_of(args, config)[0]
    data = store.table(args.table).to_arrow().slice(0, args.n)
    show_rows(data.column_names, (row.values() for row in data.to_pylist()))
    return 0


def cmd_drop(args: argparse.Namespace, config: Config) -> int:
    for store in stores_of(args, config):
        store.drop(args.table)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    storage = sub.add_parser("storage", help="inspect stored tables").add_subparsers(dest="action", required=True)
    p = storage.add_parser("tables", help="list tables per node")
    add_data_option(p)
    p.set_defaults(func=cmd_tables)
    p = storage.add_parser("stats", help="per column: chain chosen, runs, distinct count, ratio to plain Arrow")
    p.add_argument("table")
    p.add_argument("--candidates", action="store_true", help="also show every candidate chain's size")
    add_data_option(p)
    p.set_defaults(func=cmd_stats)
    p = storage.add_parser("verify", help="read every block and check its checksum")
    p.add_argument("tables", nargs="*")
    add_data_option(p)
    p.set_defaults(func=cmd_verify)
    p = storage.add_parser("head", help="print the first rows of a table")
    p.add_argument("table")
    p.add_argument("-n", type=int, default=10)
    add_data_option(p)
    p.set_defaults(func=cmd_head)
    p = storage.add_parser("drop", help="remove a table")
    p.add_argument("table")
    add_data_option(p)
    p.set_defaults(func=cmd_drop)
