"""A live load test: TPC-H on a local region of real processes, measured the dissertation's way.

TPC-H at `--sf` (default 0.1) is loaded into two native storage nodes; `cxg up`'s region
(gateway with the balancer and embedded Spark, two node processes, CPU kernels) serves it; every
one of the 14 read-only TPC-H queries runs once to warm up (as the dissertation's
mysql_init.sql did); then `--users` simulated users send `--queries` queries drawn uniformly
from the 14, and M, σ, T, throughput and percentiles are reported with `--exclude` answers left
out at each end. The peer, run in the same way on the same data when MariaDB is installed: a
region of two MariaDB nodes (PerformSys: K connections per node, the SQL unchanged) on one
MariaDB server whose InnoDB buffer pool (2 GB) holds all the data.

    python -m benchmarks.bench_live [--sf 0.1] [--users 16] [--queries 200] [--exclude 20]
                                    [--out DIR] [--json PATH] [--no-mariadb]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlglot

from benchmarks.mariadb_server import MariaDB, available
from cxg.placement import by_size, files_size, replicate_limit
from gateway import Client
from loadtests import (
    Scenario,
    Simulator,
    Summary,
    Target,
    console,
    print_table,
    report,
    run_load,
    summarize,
    tpch_list,
    write_json,
    write_logs,
)
from loadtests.scenario import Query
from regions import LocalRegion, load_config
from storage import Store, load_mysql, load_table, read_parquet, tpch


def load_native(sf: float, root: Path, nodes: int = 2) -> list[str]:
    """TPC-H at `sf` loaded into `nodes` data directories under `root` (skipped when present), each
    table placed by its size as `cxg load tpch` places it (`cxg.placement`)."""
    directories = [root / f"node-{i}" for i in range(nodes)]
    stores = [Store(d, node=f"node-{i}") for i, d in enumerate(directories)]
    if all(set(s.tables()) >= set(tpch.TABLES) for s in stores):
        return [str(d) for d in directories]
    with tempfile.TemporaryDirectory(prefix="cxg-tpch-") as tmp, console.status(f"loading TPC-H SF {sf:g}"):
        config = load_config(None, [])
        limit = replicate_limit(config, nodes)
        for name, path in tpch.generate(sf, Path(tmp)).items():
            table = read_parquet([path])
            schema = tpch.schema_for(name, table.schema, config.storage.buckets)
            schema, _ = by_size(schema, files_size([path]), limit, config.storage.buckets)
            load_table(stores, schema, table)
    return [str(d) for d in directories]


def region_sets(backend: str, slots: int, **extra: str) -> list[str]:
    return [
        f'region.backend="{backend}"',
        f"region.slots={slots}",
        "gateway.port=0",
        "region.first_port=0",
        'spark.master="local[*]"',
        *(f"{k}={v}" for k, v in extra.items()),
    ]


def live_run(
    sets: list[str], queries: list[Query], users: int, total: int, exclude: int, out: Path | None, title: str
) -> tuple[Summary, dict[str, Any]]:
    """Start the region of `sets`, warm it with every query once, run the load; its summary."""
    config = load_config(None, sets)
    with LocalRegion(config, [x for s in sets for x in ("--set", s)]) as region:
        client = Client(region.url)
        with console.status(f"{title}: warming up with each query once"):
            for q in queries:
                client.execute(q.sql, tag=q.tag)
        simulator = Simulator([Target(1, region.url)], users, Scenario(queries, "random", total=total, seed=1))
        run = run_load(simulator, total, title)
        cluster = client.cluster()
    summary = summarize(run.records, exclude)
    report(run, summary, title)
    if out is not None:
        write_logs(run, summary, out, title)
    return summary, {"counters": cluster["counters"], "seconds": run.seconds}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sf", type=float, default=0.1)
    p.add_argument("--users", type=int, default=16)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--exclude", type=int, default=20)
    p.add_argument("--slots", type=int, default=os.cpu_count() or 1, help="K per node (default: the cores)")
    p.add_argument("--data", type=Path, help="data directory to load into / reuse (default: a temporary one)")
    p.add_argument("--out", type=Path, help="write the logs and plots of each run under this directory")
    p.add_argument("--json", type=Path)
    p.add_argument("--no-mariadb", action="store_true")
    args = p.parse_args(argv)
    figures: dict[str, Any] = {"sf": args.sf, "users": args.users, "queries": args.queries, "exclude": args.exclude}
    rows = []
    with tempfile.TemporaryDirectory(prefix="cxg-live-") as tmp:
        root = args.data or Path(tmp)
        data = load_native(args.sf, root)
        queries = tpch_list(14)
        sets = region_sets("native", args.slots, **{"storage.data": json.dumps(data)})
        started = time.perf_counter()
        summary, extra = live_run(
            sets, queries, args.users, args.queries, args.exclude, args.out and args.out / "native", "native nodes"
        )
        figures["native"] = {**summary.to_json(), **extra, "wall_s": time.perf_counter() - started}
        rows.append(("cxg: native nodes + Spark", summary))
        if not args.no_mariadb and available():
            with MariaDB(Path(tmp) / "mariadb", buffer_pool="2G") as server:
                with console.status(f"loading TPC-H SF {args.sf:g} into MariaDB"):
                    for name, path in tpch.generate(args.sf, Path(tmp) / "parquet").items():
                        load_mysql(server.url, name, read_parquet([path]))
                mysql_queries = [
                    Query(q.tag, sqlglot.transpile(q.sql, read="duckdb", write="mysql")[0]) for q in queries
                ]
                sets = region_sets("mysql", args.slots, **{"region.mysql_url": f'"{server.url}"'})
                started = time.perf_counter()
                summary, extra = live_run(
                    sets,
                    mysql_queries,
                    args.users,
                    args.queries,
                    args.exclude,
                    args.out and args.out / "mariadb",
                    "MariaDB nodes (PerformSys)",
                )
                figures["mariadb"] = {**summary.to_json(), **extra, "wall_s": time.perf_counter() - started}
                rows.append(("PerformSys: MariaDB nodes", summary))
    print_table(
        f"TPC-H SF {args.sf:g}, {args.users} users, {args.queries} queries uniform over TPC-H 1..14, "
        f"{args.exclude} + {args.exclude} excluded; 2 nodes x {args.slots} slots; seconds",
        ["region", "T", "queries/s", "M", "σ", "p50", "p95", "p99", "errors", "rejected"],
        [
            [
                name,
                f"{s.T:.1f}",
                f"{s.throughput:.2f}",
                f"{s.overall.mean:.3f}",
                f"{s.overall.sigma:.3f}",
                f"{s.overall.p50:.3f}",
                f"{s.overall.p95:.3f}",
                f"{s.overall.p99:.3f}",
                s.overall.errors,
                s.overall.rejections,
            ]
            for name, s in rows
        ],
    )
    write_json(args.json, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
