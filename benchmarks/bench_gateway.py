"""Gateway benchmark: what a query costs on the way through the gateway, and the dissertation's
Table 4.1 on simulation-mode nodes.

1. Overhead per trivial query over loopback (p50/p99 of one client's sequential requests) and
   throughput (many concurrent clients), side by side in one run with the peers that bound it:
   a bare aiohttp handler (the HTTP floor of this machine), the gateway answering a constant
   query itself, the whole path gateway -> balancer -> node with a zero-time simulated query,
   and, when MariaDB is installed, SELECT 1 through a MariaDB node against PyMySQL straight to
   the server. Every server is a separate process; the load comes from this one.
2. Table 4.1 (seed 004): 50 users, 1000 queries uniform over the 14 TPC-H query times of Table
   5.5 at 5 GB, first and last 100 answers excluded, 1..7 nodes of 8 slots; T, M and σ in
   simulated minutes next to the published values, and the speedup T(1)/T(n).

    python -m benchmarks.bench_gateway [--json PATH] [--time-scale 0.05] [--nodes 1-7]
                                       [--dispatch round-robin|free-slot-first|both] [--skip-table]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pymysql
from aiohttp import web
from hdrh.histogram import HdrHistogram

from benchmarks.mariadb_server import MariaDB, available
from benchmarks.performsys import TABLE_4_1, Setup, run_setup
from gateway import Client, GatewayError, free_port
from loadtests import console, print_table, write_json
from regions import LocalRegion, load_config
from storage import create_database

Request = Callable[[aiohttp.ClientSession], Awaitable[None]]


# ---- 1. overhead and throughput ---------------------------------------------------------------


async def _latencies(request: Request, count: int) -> dict[str, float]:
    histogram = HdrHistogram(1, 60_000_000, 3)
    async with aiohttp.ClientSession() as session:
        for _ in range(max(50, count // 10)):  # warm-up
            await request(session)
        for _ in range(count):
            started = time.perf_counter()
            await request(session)
            histogram.record_value(max(1, int((time.perf_counter() - started) * 1e6)))
    return {
        "p50_ms": histogram.get_value_at_percentile(50) / 1000,
        "p99_ms": histogram.get_value_at_percentile(99) / 1000,
        "mean_ms": histogram.get_mean_value() / 1000,
    }


async def _throughput(request: Request, concurrency: int, seconds: float) -> float:
    done = 0
    deadline = time.perf_counter() + seconds

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            await request(session)
            done += 1

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        started = time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
        return done / (time.perf_counter() - started)


def _post(url: str, body: dict[str, Any]) -> Request:
    async def request(session: aiohttp.ClientSession) -> None:
        async with session.post(url, json=body, headers={"Accept": "application/json"}) as response:
            payload = await response.read()
            if response.status != 200:
                raise RuntimeError(f"{url}: HTTP {response.status}: {payload[:200]!r}")

    return request


def echo_app() -> web.Application:
    """The floor: an aiohttp handler that reads the request and answers a one-row result."""

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"id": "1", "state": "succeeded", "rows": [[1]]})

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.add_routes([web.post("/v1/statements", answer), web.get("/healthz", healthz)])
    return app


def _wait_http(url: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            Client(url, timeout=2).get("/healthz")
            return
        except GatewayError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not start") from None
            time.sleep(0.1)


def _serve_echo(port: int) -> subprocess.Popen:
    code = (
        "from aiohttp import web; from benchmarks.bench_gateway import echo_app; "
        f"web.run_app(echo_app(), host='127.0.0.1', port={port}, print=None, access_log=None)"
    )
    process = subprocess.Popen([sys.executable, "-c", code])
    _wait_http(f"http://127.0.0.1:{port}", process)
    return process


def _measure(name: str, request: Request, count: int, concurrency: int, seconds: float) -> dict[str, Any]:
    latency = asyncio.run(_latencies(request, count))
    rate = asyncio.run(_throughput(request, concurrency, seconds))
    console.print(f"  {name}: p50 {latency['p50_ms']:.2f} ms, p99 {latency['p99_ms']:.2f} ms, {rate:,.0f} q/s")
    return {"path": name, **latency, "queries_per_s": rate}


def overhead(count: int, concurrency: int, seconds: float, with_mariadb: bool) -> list[dict[str, Any]]:
    rows = []
    port = free_port()
    echo = _serve_echo(port)
    try:
        rows.append(
            _measure(
                "aiohttp handler (HTTP floor)",
                _post(f"http://127.0.0.1:{port}/v1/statements", {"sql": "SELECT 1"}),
                count,
                concurrency,
                seconds,
            )
        )
    finally:
        echo.terminate()
        echo.wait()

    port = free_port()
    gateway = subprocess.Popen(
        [sys.executable, "-m", "cxg", "--set", f"gateway.port={port}", "--set", "spark.warm_up=false", "gateway"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_http(f"http://127.0.0.1:{port}", gateway)
        url = f"http://127.0.0.1:{port}/v1/statements"
        rows.append(
            _measure(
                "gateway, constant query (parse, plan, answer)",
                _post(url, {"sql": "SELECT 1"}),
                count,
                concurrency,
                seconds,
            )
        )
    finally:
        gateway.terminate()
        gateway.wait()

    sets = [
        'region.backend="simulation"',
        "region.nodes=1",
        f"region.slots={concurrency}",
        "simulation.queries={zero={seconds=0,rows=1}}",
        "gateway.port=0",
        "region.first_port=0",
    ]
    with LocalRegion(load_config(None, sets), [x for s in sets for x in ("--set", s)]) as region:
        body = {"sql": "SELECT 1", "tag": "zero"}
        rows.append(
            _measure(
                "gateway -> balancer -> node (simulated, 0 s)",
                _post(f"{region.url}/v1/statements", body),
                count,
                concurrency,
                seconds,
            )
        )
    if with_mariadb:
        rows += _mariadb_overhead(count, concurrency, seconds)
    return rows


def _mariadb_overhead(count: int, concurrency: int, seconds: float) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="cxg-bench-mariadb-") as tmp, MariaDB(Path(tmp)) as server:
        create_database(server.url)
        connection = pymysql.connect(host="127.0.0.1", port=server.port, user="root", database="tpch")
        cursor = connection.cursor()
        histogram = HdrHistogram(1, 60_000_000, 3)
        for i in range(count + 100):
            started = time.perf_counter()
            cursor.execute("SELECT 1")
            cursor.fetchall()
            if i >= 100:
                histogram.record_value(max(1, int((time.perf_counter() - started) * 1e6)))
        connection.close()
        direct = {
            "path": "PyMySQL straight to MariaDB: SELECT 1",
            "p50_ms": histogram.get_value_at_percentile(50) / 1000,
            "p99_ms": histogram.get_value_at_percentile(99) / 1000,
            "mean_ms": histogram.get_mean_value() / 1000,
            "queries_per_s": None,
        }
        console.print(f"  {direct['path']}: p50 {direct['p50_ms']:.2f} ms, p99 {direct['p99_ms']:.2f} ms")
        rows.append(direct)
        sets = [
            'region.backend="mysql"',
            "region.nodes=1",
            f"region.slots={min(concurrency, 16)}",
            f'region.mysql_url="{server.url}"',
            "gateway.port=0",
            "region.first_port=0",
        ]
        with LocalRegion(load_config(None, sets), [x for s in sets for x in ("--set", s)]) as region:
            url = f"{region.url}/v1/statements"
            rows.append(
                _measure(
                    "gateway -> balancer -> MariaDB node: SELECT 1",
                    _post(url, {"sql": "SELECT 1"}),
                    count,
                    concurrency,
                    seconds,
                )
            )
    return rows


# ---- 2. Table 4.1 -------------------------------------------------------------------------------


def table_4_1(nodes: list[int], time_scale: float, dispatch: str) -> list[dict[str, Any]]:
    rows = []
    for n in nodes:
        started = time.perf_counter()
        outcome = run_setup(Setup(nodes=n, time_scale=time_scale, dispatch=dispatch))
        s = outcome.summary
        published = TABLE_4_1[n]
        rows.append(
            {
                "nodes": n,
                "dispatch": dispatch,
                "T_min": outcome.T,
                "M_min": outcome.M,
                "sigma_min": outcome.sigma,
                "published_T_min": published[1],
                "published_M_min": published[0],
                "published_sigma_min": published[2],
                "counted": s.counted,
                "errors": s.overall.errors + s.overall.rejections,
                "overhead_ms": outcome.nominal_overhead_ms(),
                "wall_s": time.perf_counter() - started,
            }
        )
        console.print(
            f"  {dispatch}, {n} node(s): T {outcome.T:.2f} min, M {outcome.M:.3f} min, σ {outcome.sigma:.3f} min "
            f"({rows[-1]['wall_s']:.0f} s)"
        )
    first = next((r for r in rows if r["nodes"] == 1), None)
    for r in rows:
        r["speedup"] = first["T_min"] / r["T_min"] if first else None
        r["published_speedup"] = TABLE_4_1[1][1] / r["published_T_min"]
    return rows


def _nodes(text: str) -> list[int]:
    low, _, high = text.partition("-")
    nodes = list(range(int(low), int(high or low) + 1))
    if not nodes or nodes[0] < 1 or nodes[-1] > 7:
        raise argparse.ArgumentTypeError("nodes are 1..7 (Table 4.1), e.g. 1-7 or 7")
    return nodes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sf", type=float, default=0, help="not used: simulated nodes hold no data")
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the figures as JSON")
    p.add_argument("--requests", type=int, default=2000, help="sequential requests per latency figure")
    p.add_argument("--concurrency", type=int, default=32, help="concurrent clients for the throughput figure")
    p.add_argument("--seconds", type=float, default=5.0, help="seconds per throughput figure")
    p.add_argument("--time-scale", type=float, default=0.05, help="real seconds per simulated second (Table 4.1)")
    p.add_argument("--nodes", type=_nodes, default=_nodes("1-7"), help="node counts of Table 4.1 (default 1-7)")
    p.add_argument("--dispatch", choices=("round-robin", "free-slot-first", "both"), default="round-robin")
    p.add_argument("--skip-overhead", action="store_true")
    p.add_argument("--skip-table", action="store_true")
    p.add_argument("--no-mariadb", action="store_true", help="skip the MariaDB peers")
    args = p.parse_args(argv)
    figures: dict[str, Any] = {"requests": args.requests, "concurrency": args.concurrency}
    if not args.skip_overhead:
        console.print("[bold]overhead per trivial query[/]")
        rows = overhead(args.requests, args.concurrency, args.seconds, not args.no_mariadb and available())
        figures["overhead"] = rows
        print_table(
            f"Trivial query over loopback ({args.requests} sequential requests; throughput with "
            f"{args.concurrency} concurrent clients, all on this machine)",
            ["path", "p50 ms", "p99 ms", "queries/s"],
            [
                [
                    r["path"],
                    f"{r['p50_ms']:.2f}",
                    f"{r['p99_ms']:.2f}",
                    f"{r['queries_per_s']:,.0f}" if r["queries_per_s"] else "-",
                ]
                for r in rows
            ],
        )
    if not args.skip_table:
        policies = ("round-robin", "free-slot-first") if args.dispatch == "both" else (args.dispatch,)
        figures["time_scale"] = args.time_scale
        figures["table_4_1"] = []
        for policy in policies:
            console.print(f"[bold]Table 4.1, {policy} dispatch[/] (1 simulated s = {args.time_scale * 1000:g} ms)")
            rows = table_4_1(args.nodes, args.time_scale, policy)
            figures["table_4_1"] += rows
            print_table(
                f"Table 4.1 in simulation ({policy}): 50 users, 1000 queries, 100 + 100 excluded, 8 slots per node; "
                "minutes (ours | published)",
                ["nodes", "T", "M", "σ", "speedup", "beyond execution, ms/query"],
                [
                    [
                        r["nodes"],
                        f"{r['T_min']:.2f} | {r['published_T_min']:.2f}",
                        f"{r['M_min']:.3f} | {r['published_M_min']:.3f}",
                        f"{r['sigma_min']:.3f} | {r['published_sigma_min']:.3f}",
                        f"{r['speedup']:.2f} | {r['published_speedup']:.2f}" if r["speedup"] else "-",
                        f"{r['overhead_ms']:.1f}",
                    ]
                    for r in rows
                ],
            )
    write_json(args.json, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
