"""`cxg load ...`: tables from TPC-H, Parquet or CSV into the nodes' data directories (with the
Spark ingest pipeline or in this process), or into a MariaDB database; a progress bar per table.
`cxg demo` loads through the same functions."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from sqlalchemy.engine import make_url

from cxg.console import console
from cxg.data_dirs import add_data_option, stores_of
from gateway import Config, parse_size
from gpu_kernels import cuda_available
from regions import spark_session
from storage import (
    Column,
    EncodingOptions,
    LoadOptions,
    Placement,
    SchemaError,
    Source,
    Store,
    TableSchema,
    load_mysql,
    load_table,
    spark_load,
    tpch,
)

Job = tuple[TableSchema, Source]
Loaded = tuple[str, int, float]  # table, rows, seconds


def load_options(config: Config, args: argparse.Namespace | None = None) -> LoadOptions:
    """The configured load options, with the command line's overrides when `args` has them. Where
    the scans run on GPUs, blocks are as large as seed 004's rule makes them from the device: its
    decoded-data area over the scans that share it (`gpu_kernels.device_pipeline.block_budget`)."""
    budget = config.storage.block_budget
    if args is not None and args.block_budget:
        budget = parse_size(args.block_budget)
    elif config.storage.backend != "numpy" and cuda_available():
        from gpu_kernels.device_pipeline import block_budget

        memory = None if config.storage.device_memory == "auto" else parse_size(config.storage.device_memory)
        budget = block_budget(memory, config.region.slots or os.cpu_count() or 1)
    return LoadOptions(
        block_budget=budget,
        compression=(args.compression if args is not None else None) or config.storage.compression,
        mode=args.mode if args is not None else "replace",
        encoding=EncodingOptions(allow_zstd=config.storage.zstd_strings),
    )


@contextmanager
def spark_tasks(spark: Any, progress: Progress, task: TaskID) -> Iterator[None]:
    """Show the finished/total tasks of the Spark jobs run inside the block on the progress bar;
    the bar ends full when the block succeeds. The jobs are found by a job group of their own,
    so stages that start and end between two looks are counted too."""
    context = spark.sparkContext
    tracker = context.statusTracker()
    group = f"cxg-load-{uuid.uuid4().hex[:12]}"
    context.setJobGroup(group, "cxg load")
    done = threading.Event()

    def look() -> tuple[int, int]:
        completed = total = 0
        for job in tracker.getJobIdsForGroup(group):
            info = tracker.getJobInfo(job)
            for stage in info.stageIds if info is not None else ():
                stage_info = tracker.getStageInfo(stage)
                if stage_info is not None:
                    completed += stage_info.numCompletedTasks
                    total += stage_info.numTasks
        return completed, total

    def poll() -> None:
        while not done.wait(0.25):
            completed, total = look()
            progress.update(task, total=total or None, completed=completed)

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
    _, total = look()  # the load succeeded, so every task of its jobs did (the tracker may lag behind)
    progress.update(task, total=total, completed=total)


def load_jobs_mysql(url: str, jobs: list[Job]) -> list[Loaded]:
    """Load each job into the MariaDB database at `url` with a progress bar."""
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


def load_jobs(stores: list[Store], jobs: list[Job], options: LoadOptions, config: Config, engine: str) -> list[Loaded]:
    """Load each job into the stores with a progress bar, as a Spark job (`engine` "spark", on
    the configured Spark) or in this process ("local")."""
    done = []
    columns = (
        TextColumn("[bold]{task.description:<10}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("rows" if engine == "local" else "Spark tasks"),
        TimeElapsedColumn(),
    )
    spark = None
    if engine == "spark":
        with console.status(f"starting Spark ({config.spark.master}) for the ingest pipeline"):
            spark = spark_session(config.spark.settings())
    with Progress(*columns, console=console) as progress:
        for schema, source in jobs:
            task = progress.add_task(schema.name, total=None)
            started = time.perf_counter()
            if spark is not None:
                with spark_tasks(spark, progress, task):
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
    config: Config,
    engine: str,
    buckets: int | None = None,
    tables: list[str] | None = None,
    mysql: str | None = None,
) -> list[Loaded]:
    """Generate TPC-H at `scale_factor` and load all (or some) of its tables into the stores, or
    into the MariaDB database at `mysql`."""
    with tempfile.TemporaryDirectory(prefix="cxg-tpch-") as tmp:
        with console.status(f"generating TPC-H SF {scale_factor:g} with tpchgen-cli"):
            files = tpch.generate(scale_factor, Path(tmp), tables)
        jobs: list[Job] = [
            (
                tpch.schema_for(name, pq.read_schema(path), buckets or config.storage.buckets),
                Source("parquet", (str(path),)),
            )
            for name, path in files.items()
        ]
        if mysql:
            return load_jobs_mysql(mysql, jobs)
        return load_jobs(stores, jobs, options, config, engine)


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
    options = load_options(config, args)
    done = load_tpch(stores, args.sf, options, config, _engine(args, config), args.buckets, tables, args.mysql)
    print_loaded(stores, done, args.mysql)
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
        done = load_jobs(stores, [(schema, source)], load_options(config, args), config, _engine(args, config))
    print_loaded(stores, done, args.mysql)
    return 0


def print_loaded(stores: list[Store], done: list[Loaded], mysql: str | None = None) -> None:
    where = make_url(mysql).render_as_string(hide_password=True) if mysql else ", ".join(str(s.root) for s in stores)
    for name, rows, seconds in done:
        console.print(f"loaded [bold]{name}[/]: {rows:,} rows in {seconds:.2f} s into {where}")


def _add_load_options(parser: argparse.ArgumentParser) -> None:
    add_data_option(parser)
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
