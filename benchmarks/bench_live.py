"""A live load test: TPC-H on a local region of real processes, measured the dissertation's way.

TPC-H at `--sf` (default 0.1) is loaded into two native storage nodes, each table placed by its
size as `cxg load` places it; `cxg up`'s region (gateway with the balancer and embedded Spark, two
node processes, CPU kernels) serves it; every one of the 14 read-only TPC-H queries runs once to
warm up (as the dissertation's mysql_init.sql did); then, for each count of `--users`, that many
simulated users send `--queries` queries drawn uniformly from the 14, and M, σ, T, throughput and
percentiles are reported with `--exclude` answers left out at each end. The peers, run in the same
way on the same data: DuckDB behind a plain aiohttp handler with as many queries at once as the
region has slots (`benchmarks.duckdb_ceiling`: the single machine's ceiling), and, when MariaDB is
installed, a region of two MariaDB nodes (PerformSys: K connections per node, the SQL unchanged) on
one MariaDB server whose InnoDB buffer pool (2 GB) holds all the data. With `--out`, a plot of
queries per second against users.

    python -m benchmarks.bench_live [--sf 0.1] [--users 1,4,16,64] [--queries 200] [--exclude 20]
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

from benchmarks.duckdb_ceiling import ceiling
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


def load_native(files: dict[str, Path], root: Path, nodes: int = 2) -> list[str]:
    """The TPC-H `files` loaded into `nodes` data directories under `root` (skipped when present),
    each table placed by its size as `cxg load tpch` places it (`cxg.placement`)."""
    directories = [root / f"node-{i}" for i in range(nodes)]
    stores = [Store(d, node=f"node-{i}") for i, d in enumerate(directories)]
    if all(set(s.tables()) >= set(tpch.TABLES) for s in stores):
        return [str(d) for d in directories]
    config = load_config(None, [])
    limit = replicate_limit(config, nodes)
    with console.status("loading TPC-H into the nodes"):
        for name, path in files.items():
            table = read_parquet([path])
            schema = tpch.schema_for(name, table.schema, config.storage.buckets)
            schema, _ = by_size(schema, files_size([path]), limit, config.storage.buckets)
            load_table(stores, schema, table)
    return [str(d) for d in directories]


def region_sets(backend: str, slots: int, users: int, **extra: str) -> list[str]:
    """A region of two nodes of `backend` with `slots` each, whose queue holds `users` queries:
    every user's query waits its turn rather than being turned away (`queue_full`)."""
    return [
        f'region.backend="{backend}"',
        f"region.slots={slots}",
        f"gateway.max_queue={max(users, 1)}",
        "gateway.port=0",
        "region.first_port=0",
        'spark.master="local[*]"',
        *(f"{k}={v}" for k, v in extra.items()),
    ]


Measured = dict[int, tuple[Summary, dict[str, Any]]]  # users -> summary, and what else was seen


def live_runs(
    sets: list[str], queries: list[Query], users: list[int], args: argparse.Namespace, title: str
) -> Measured:
    """Start the region of `sets`, wait for its Spark, warm it with every query once, then a load
    per count of `users`."""
    config = load_config(None, sets)
    with LocalRegion(config, [x for s in sets for x in ("--set", s)]) as region:
        if config.region.backend == "native" and config.spark.warm_up:
            wait_for_spark(Client(region.url), title)
        return load_runs(region.url, queries, users, args, title)


def wait_for_spark(client: Client, title: str, timeout: float = 300.0) -> None:
    """Until the gateway's Spark, which starts in the background, is up: a region measured in its
    steady state, not while a JVM starting beside it takes a core."""
    deadline = time.monotonic() + timeout
    with console.status(f"{title}: waiting for the gateway's Spark to start"):
        while client.cluster()["spark"]["state"] == "not started":
            if time.monotonic() > deadline:
                raise TimeoutError(f"the gateway's Spark did not start within {timeout:.0f} s")
            time.sleep(0.5)


def load_runs(url: str, queries: list[Query], users: list[int], args: argparse.Namespace, title: str) -> Measured:
    """Every query once to warm up, then `args.queries` queries from each count of `users` users."""
    client = Client(url)
    with console.status(f"{title}: warming up with each query once"):
        for q in queries:
            client.execute(q.sql, tag=q.tag)
    measured: Measured = {}
    for count in users:
        named = f"{title}, {count} users"
        simulator = Simulator([Target(1, url)], count, Scenario(queries, "random", total=args.queries, seed=1))
        started = time.perf_counter()
        run = run_load(simulator, args.queries, named)
        summary = summarize(run.records, args.exclude)
        report(run, summary, named)
        if args.out is not None:
            write_logs(run, summary, args.out / title.split(":")[0].replace(" ", "_") / f"users_{count}", named)
        measured[count] = summary, {"seconds": run.seconds, "wall_s": time.perf_counter() - started}
    return measured


def plot(results: dict[str, Measured], path: Path, sf: float) -> None:
    """Queries per second against users, a line per system."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5))
    for name, measured in results.items():
        counts = sorted(measured)
        axes.plot(counts, [measured[c][0].throughput for c in counts], marker="o", label=name)
    axes.set_xscale("log", base=2)
    axes.set_xlabel("simulated users")
    axes.set_ylabel("queries per second")
    axes.set_title(f"TPC-H SF {sf:g}, queries 1..14 drawn uniformly")
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sf", type=float, default=0.1)
    p.add_argument("--users", default="16", help="simulated users, or several counts: 1,4,16,64")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--exclude", type=int, default=20)
    p.add_argument("--slots", type=int, default=os.cpu_count() or 1, help="K per node (default: the cores)")
    p.add_argument("--data", type=Path, help="data directory to load into / reuse (default: a temporary one)")
    p.add_argument("--out", type=Path, help="write the logs and plots of each run under this directory")
    p.add_argument("--json", type=Path)
    p.add_argument("--no-mariadb", action="store_true")
    args = p.parse_args(argv)
    users = [int(u) for u in args.users.split(",")]
    results: dict[str, Measured] = {}
    with tempfile.TemporaryDirectory(prefix="cxg-live-") as tmp:
        root = args.data or Path(tmp)
        with console.status(f"generating TPC-H SF {args.sf:g}"):
            files = tpch.generate(args.sf, Path(tmp) / "parquet")
        data = load_native(files, root)
        queries = tpch_list(14)
        sets = region_sets("native", args.slots, max(users), **{"storage.data": json.dumps(data)})
        results["cxg: native nodes"] = live_runs(sets, queries, users, args, "cxg: native nodes")
        concurrency = len(data) * args.slots  # the region's slots
        with ceiling(files, concurrency, os.cpu_count() or 1) as url:
            results["DuckDB ceiling"] = load_runs(url, queries, users, args, "DuckDB ceiling")
        if not args.no_mariadb and available():
            with MariaDB(Path(tmp) / "mariadb", buffer_pool="2G") as server:
                with console.status(f"loading TPC-H SF {args.sf:g} into MariaDB"):
                    for name, path in files.items():
                        load_mysql(server.url, name, read_parquet([path]))
                mysql_queries = [
                    Query(q.tag, sqlglot.transpile(q.sql, read="duckdb", write="mysql")[0]) for q in queries
                ]
                sets = region_sets("mysql", args.slots, max(users), **{"region.mysql_url": f'"{server.url}"'})
                results["PerformSys: MariaDB nodes"] = live_runs(
                    sets, mysql_queries, users, args, "PerformSys: MariaDB nodes"
                )
    print_table(
        f"TPC-H SF {args.sf:g}, {args.queries} queries uniform over TPC-H 1..14, "
        f"{args.exclude} + {args.exclude} excluded; 2 nodes x {args.slots} slots; seconds",
        ["system", "users", "T", "queries/s", "M", "σ", "p50", "p95", "p99", "errors", "rejected"],
        [
            [
                name,
                str(count),
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
            for name, measured in results.items()
            for count, (s, _) in sorted(measured.items())
        ],
    )
    if args.out is not None:
        plot(results, args.out / "queries_per_second.png", args.sf)
    figures: dict[str, Any] = {"sf": args.sf, "users": users, "queries": args.queries, "exclude": args.exclude}
    figures["systems"] = {
        name: {str(count): {**s.to_json(), **extra} for count, (s, extra) in measured.items()}
        for name, measured in results.items()
    }
    write_json(args.json, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
