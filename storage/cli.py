"""`cxg load ...` and `cxg storage ...`: loading tables and inspecting how they are stored."""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable

from gateway.config import Config, parse_size
from storage import tpch
from storage.catalog import Column, Placement, TableSchema
from storage.encoding_choice import CHAIN_PREFERENCE, EncodingOptions
from storage.errors import SchemaError
from storage.loader import LoadOptions, load_table
from storage.sources import Source
from storage.stats import TableSummary, summarize
from storage.store import Store

console = Console()
if not console.is_terminal:
    console = Console(width=160)
Job = tuple[TableSchema, Source]


def stores_of(args: argparse.Namespace, config: Config) -> list[Store]:
    """One store per `--data` directory (default: storage.data), named node-0, node-1, ..."""
    directories = args.data or config.storage.data
    return [Store(d, node=f"node-{i}") for i, d in enumerate(directories)]


def load_options(args: argparse.Namespace, config: Config) -> LoadOptions:
    budget = parse_size(args.block_budget) if args.block_budget else config.storage.block_budget
    return LoadOptions(
        block_budget=budget,
        compression=args.compression or config.storage.compression,
        mode=args.mode,
        encoding=EncodingOptions(allow_zstd=config.storage.zstd_strings),
    )


@contextmanager
def _spark_tasks(spark, progress: Progress, task) -> Iterator[None]:
    """Show the Spark job's finished/total tasks on the progress bar while it runs."""
    tracker = spark.sparkContext.statusTracker()
    done = threading.Event()
    seen: dict[int, tuple[int, int]] = {}

    def poll() -> None:
        while not done.wait(0.25):
            for stage in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage)
                if info is not None:
                    seen[stage] = (info.numCompletedTasks, info.numTasks)
            total = sum(t for _, t in seen.values())
            progress.update(task, total=total or None, completed=sum(c for c, _ in seen.values()))

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


def load_jobs_mysql(url: str, jobs: list[Job]) -> list[tuple[str, int, float]]:
    """Load each job into the MariaDB database at `url` with a progress bar."""
    from storage.mysql_load import load_mysql

    done = []
    columns = (TextColumn("[bold]{task.description:<10}"), BarColumn(), MofNCompleteColumn(), TextColumn("rows"))
    with Progress(*columns, TimeElapsedColumn(), console=console) as progress:
        for schema, source in jobs:
            table = source.read()
            task = progress.add_task(schema.name, total=table.num_rows)
            started = time.perf_counter()
            load_mysql(url, schema.name, table, lambda n, t=task: progress.advance(t, n))
            done.append((schema.name, table.num_rows, time.perf_counter() - started))
    return done


def load_jobs(
    stores: list[Store], jobs: list[Job], options: LoadOptions, engine: str = "local", config: Config | None = None
) -> list[tuple[str, int, float]]:
    """Load each job with a progress bar, locally or as a Spark job; (table, rows, seconds) per job."""
    done = []
    unit = "rows" if engine == "local" else "Spark tasks"
    columns = (
        TextColumn("[bold]{task.description:<10}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(unit),
        TimeElapsedColumn(),
    )
    spark = None
    if engine == "spark":
        from regions.spark_session import spark_session

        with console.status("starting Spark"):
            spark = spark_session((config or Config()).spark.settings())
    with Progress(*columns, console=console) as progress:
        for schema, source in jobs:
            task = progress.add_task(schema.name, total=None)
            started = time.perf_counter()
            if spark is not None:
                from storage.spark_ingest import spark_load

                with _spark_tasks(spark, progress, task):
                    spark_load(spark, source.spark(spark), schema, [str(s.root) for s in stores], options)
                rows = _rows_loaded(stores, schema)
            else:
                table = source.read()
                progress.update(task, total=table.num_rows)
                load_table(stores, schema, table, options, lambda n, t=task: progress.advance(t, n))
                rows = table.num_rows
            done.append((schema.name, rows, time.perf_counter() - started))
    return done


def _rows_loaded(stores: list[Store], schema: TableSchema) -> int:
    counts = [s.table(schema.name).rows for s in stores]
    return counts[0] if schema.placement.kind == "replicated" else sum(counts)


def load_tpch(
    stores: list[Store],
    scale_factor: float,
    options: LoadOptions,
    buckets: int,
    tables: list[str] | None = None,
    engine: str = "local",
    config: Config | None = None,
    target: str | None = None,
) -> list[tuple[str, int, float]]:
    """Generate TPC-H at `scale_factor` and load all (or some) of its tables (into the stores,
    or into the MariaDB database at `target`)."""
    with tempfile.TemporaryDirectory(prefix="cxg-tpch-") as tmp:
        with console.status(f"generating TPC-H SF {scale_factor:g} with tpchgen-cli"):
            files = tpch.generate(scale_factor, Path(tmp), tables)
        jobs: list[Job] = [
            (tpch.schema_for(name, pq.read_schema(path), buckets), Source("parquet", (str(path),)))
            for name, path in files.items()
        ]
        if target:
            return load_jobs_mysql(target, jobs)
        return load_jobs(stores, jobs, options, engine, config)


def _schema_from_args(name: str, arrow_schema: pa.Schema, args: argparse.Namespace, config: Config) -> TableSchema:
    placement = Placement.parse(args.placement, args.buckets or config.storage.buckets)
    sort_key = [k.strip() for k in args.sort_key.split(",") if k.strip()] if args.sort_key else []
    return TableSchema.from_arrow(name, arrow_schema, sort_key, placement)


def _schema_file(path: str, name: str, args: argparse.Namespace, config: Config) -> TableSchema:
    """A table definition from JSON: {"columns": [{"name", "type", "nullable"}], "sort_key", "placement"}."""
    try:
        data = json.loads(Path(path).read_text())
        columns = tuple(Column(c["name"], c["type"], c.get("nullable", True)) for c in data["columns"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SchemaError(f"schema file {path}: {e}") from e
    sort_key = args.sort_key.split(",") if args.sort_key else data.get("sort_key", [])
    placement_text = args.placement if args.placement != "replicated" else data.get("placement", "replicated")
    placement = Placement.parse(placement_text, args.buckets or config.storage.buckets)
    return TableSchema(name, columns, tuple(sort_key), placement)


def _engine(args: argparse.Namespace, config: Config) -> str:
    return args.engine or config.storage.ingest


def cmd_load_tpch(args: argparse.Namespace, config: Config) -> int:
    tables = args.tables.split(",") if args.tables else None
    stores = stores_of(args, config)
    buckets = args.buckets or config.storage.buckets
    options = load_options(args, config)
    done = load_tpch(stores, args.sf, options, buckets, tables, _engine(args, config), config, args.mysql)
    _print_loaded(stores, done, args.mysql)
    return 0


def cmd_load_files(args: argparse.Namespace, config: Config) -> int:
    stores = stores_of(args, config)
    if args.source == "parquet":
        source = Source("parquet", tuple(args.files))
    else:
        given = _schema_file(args.schema, args.table, args, config) if args.schema else None
        source = Source("csv", tuple(args.files), args.delimiter, not args.no_header, given)
    schema = source.schema or _schema_from_args(args.table, source.arrow_schema(), args, config)
    if args.mysql:
        done = load_jobs_mysql(args.mysql, [(schema, source)])
    else:
        done = load_jobs(stores, [(schema, source)], load_options(args, config), _engine(args, config), config)
    _print_loaded(stores, done, args.mysql)
    return 0


def _print_loaded(stores: list[Store], done: list[tuple[str, int, float]], mysql: str | None = None) -> None:
    where = _hide_password(mysql) if mysql else ", ".join(str(s.root) for s in stores)
    for name, rows, seconds in done:
        console.print(f"loaded [bold]{name}[/]: {rows:,} rows in {seconds:.2f} s into {where}")


def _hide_password(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def render_summary(summary: TableSummary) -> RichTable:
    title = (
        f"{summary.name}: {summary.rows:,} rows in {summary.blocks} blocks of RC={summary.block_rows:,} rows "
        f"(BS={human_bytes(summary.budget_bytes)}, RS={summary.record_bytes} B), {summary.placement}, "
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
            human_bytes(c.encoded_bytes),
            human_bytes(c.plain_bytes),
            f"{c.ratio:.1f}x",
        )
    ratio = summary.plain_bytes / summary.encoded_bytes if summary.encoded_bytes else 0
    table.add_section()
    table.add_row(
        "total",
        "",
        f"on disk {human_bytes(summary.disk_bytes)}",
        "",
        "",
        "",
        "",
        human_bytes(summary.encoded_bytes),
        human_bytes(summary.plain_bytes),
        f"{ratio:.1f}x",
    )
    return table


def render_candidates(summary: TableSummary) -> RichTable:
    """Every candidate chain's size per column (summed over blocks); the planner kept the smallest per block."""
    chains = sorted({chain for c in summary.columns for chain in c.candidates}, key=CHAIN_PREFERENCE.index)
    table = RichTable("column", *chains, title="candidate sizes (smallest per block is chosen)", title_justify="left")
    for c in summary.columns:
        smallest = min(c.candidates.values(), default=None)
        cells = []
        for chain in chains:
            size = c.candidates.get(chain)
            text = "" if size is None else human_bytes(size)
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
                human_bytes(s.encoded_bytes),
                human_bytes(s.disk_bytes),
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
    table = RichTable(*data.column_names)
    for row in data.to_pylist():
        table.add_row(*("NULL" if v is None else str(v) for v in row.values()))
    console.print(table)
    return 0


def cmd_drop(args: argparse.Namespace, config: Config) -> int:
    for store in stores_of(args, config):
        store.drop(args.table)
    return 0


def _add_data(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", action="append", metavar="DIR", help="node data directory, repeat for several nodes")


def _add_load_options(parser: argparse.ArgumentParser) -> None:
    _add_data(parser)
    parser.add_argument("--mode", choices=("replace", "append"), default="replace")
    parser.add_argument("--block-budget", metavar="SIZE", help="BS, memory for one decoded block (e.g. 64MiB)")
    parser.add_argument("--compression", choices=("zstd", "none"), help="block files on disk")
    parser.add_argument("--buckets", type=int, help="hash buckets of a hash-placed table")
    parser.add_argument(
        "--engine",
        choices=("spark", "local"),
        help="spark: the ingest pipeline (default storage.ingest); local: in process",
    )
    parser.add_argument(
        "--mysql", metavar="URL", help="load into this MariaDB/MySQL database instead (mysql://user@host:port/db)"
    )


def _add_table_layout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("table", help="table name")
    parser.add_argument("files", nargs="+", help="source files")
    parser.add_argument("--sort-key", metavar="COLS", help="comma-separated sort key")
    parser.add_argument("--placement", default="replicated", help="replicated or hash(col, ...)")


def register(sub: argparse._SubParsersAction) -> None:
    load = sub.add_parser("load", help="load tables from TPC-H, Parquet or CSV").add_subparsers(
        dest="source", required=True
    )
    p = load.add_parser("tpch", help="generate TPC-H data and load all 8 tables")
    p.add_argument("--sf", type=float, default=0.01, help="scale factor (default 0.01)")
    p.add_argument("--tables", help="comma-separated subset of the 8 tables")
    _add_load_options(p)
    p.set_defaults(func=cmd_load_tpch)

    p = load.add_parser("parquet", help="load Parquet files (or directories) as one table")
    _add_table_layout(p)
    _add_load_options(p)
    p.set_defaults(func=cmd_load_files)

    p = load.add_parser("csv", help="load CSV files as one table")
    _add_table_layout(p)
    p.add_argument("--delimiter", default=",")
    p.add_argument("--no-header", action="store_true", help="the files have no header row")
    p.add_argument("--schema", metavar="JSON", help="column names and types instead of inference")
    _add_load_options(p)
    p.set_defaults(func=cmd_load_files)

    storage = sub.add_parser("storage", help="inspect stored tables").add_subparsers(dest="action", required=True)
    p = storage.add_parser("tables", help="list tables per node")
    _add_data(p)
    p.set_defaults(func=cmd_tables)
    p = storage.add_parser("stats", help="per column: chain chosen, runs, distinct count, ratio to plain Arrow")
    p.add_argument("table")
    p.add_argument("--candidates", action="store_true", help="also show every candidate chain's size")
    _add_data(p)
    p.set_defaults(func=cmd_stats)
    p = storage.add_parser("verify", help="read every block and check its checksum")
    p.add_argument("tables", nargs="*")
    _add_data(p)
    p.set_defaults(func=cmd_verify)
    p = storage.add_parser("head", help="print the first rows of a table")
    p.add_argument("table")
    p.add_argument("-n", type=int, default=10)
    _add_data(p)
    p.set_defaults(func=cmd_head)
    p = storage.add_parser("drop", help="remove a table")
    p.add_argument("table")
    _add_data(p)
    p.set_defaults(func=cmd_drop)
