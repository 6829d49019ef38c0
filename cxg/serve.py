"""`cxg gateway`, `cxg node`, `cxg router` (one role per process, dialling its upstream),
`cxg balance-regions` (the central balancer between regions) and `cxg up` (a local region of such
processes, or every region of a file of several). Here the gateway gets the region's Spark session
factory, which it warms in the background so the first join query does not wait for it."""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib
import logging
import os
import threading
import time
from pathlib import Path

from aiohttp import web

from balancer import (
    Journal,
    MysqlBackend,
    NativeBackend,
    NodeServer,
    Router,
    SimulationBackend,
    configure_logs,
    serve,
)
from cxg.client_commands import show_status
from cxg.console import console
from gateway import Client, SparkFactory, reachable
from gpu_kernels import get_backend
from regions import (
    NODE_SHARES,
    CentralBalancer,
    Config,
    LocalRegion,
    check_master,
    gateway_app,
    interrupt_on_sigterm,
    load_config,
    node_memory_budget,
    region_gateway,
    session_factory,
)
from storage import ConfigError, Node, Store, limit_private_memory, parse_size

log = logging.getLogger("cxg.gateway")


def _logging(config: Config, verbose: bool = False) -> None:
    """The process's log lines to stderr in `gateway.log_format`, each carrying the query it was logged for."""
    configure_logs(config.gateway.log_format, logging.DEBUG if verbose else logging.INFO)


def _upstream(args: argparse.Namespace, config: Config) -> str:
    return args.upstream or config.gateway.url


def warm_spark(spark: SparkFactory, master: str) -> threading.Thread:
    """Start the region's Spark session on a background thread: starting it takes seconds, which
    the first join query would otherwise spend waiting with no sign of life."""

    def start() -> None:
        started = time.perf_counter()
        log.info("starting Spark (%s) in the background", master)
        spark()
        log.info("Spark (%s) ready after %.1f s", master, time.perf_counter() - started)

    thread = threading.Thread(target=start, daemon=True, name="spark-warm-up")
    thread.start()
    return thread


def load_node_engine() -> threading.Thread:
    """Import the node's join engine on a background thread: a third of a second that the first
    whole query would otherwise wait."""
    thread = threading.Thread(target=importlib.import_module, args=("datafusion",), daemon=True, name="engine-load")
    thread.start()
    return thread


def cmd_gateway(args: argparse.Namespace, config: Config) -> int:
    _logging(config)
    g = config.gateway
    tls = g.server_tls()
    if config.region.backend == "native":
        check_master(config.spark)
    spark = session_factory(config.spark, f"region-{g.region}")
    gateway = region_gateway(config, spark)
    auth = f"{len(g.tokens)} token(s)" if g.tokens else "no authentication"
    print(
        f"gateway: {g.url}, region {g.region} ({config.region.backend} nodes), {auth}",
        flush=True,
    )
    if config.region.backend == "native" and config.spark.warm_up:
        warm_spark(spark, config.spark.master)
    drain = functools.partial(gateway.leave, g.drain_timeout)
    asyncio.run(serve(gateway_app(config, gateway), g.host, g.port, tls=tls, drain=drain))
    return 0


def _status_app(name: str) -> web.Application:
    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "node": name})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    return app


def cmd_node(args: argparse.Namespace, config: Config) -> int:
    _logging(config, args.verbose)
    kind = args.kind or config.region.backend
    slots = args.slots or config.region.slots or os.cpu_count() or 1
    journal = Journal(config.gateway.log_dir or None, "node", args.name, config.gateway.log_format)
    url = f"http://{reachable(args.host, args.advertise or '')}:{args.port}"
    if args.memory is not None:
        config.storage.node_memory = args.memory
    budget = node_memory_budget(config, nodes=1, with_spark=False)  # alone: `cxg up` says what it shares
    limit_private_memory(budget)
    if kind == "native":
        store = Store(args.data or config.storage.data[0], node=args.name)
        backend = get_backend(args.backend or config.storage.backend)
        if config.storage.device_memory != "auto":
            backend.device_memory = parse_size(config.storage.device_memory)
        worker_memory = budget // NODE_SHARES if budget else None
        node = Node(store, backend, args.scan_slots, args.threads, args.processes or 0, worker_memory)
        load_node_engine()
        server = NodeServer(args.name, NativeBackend(store), slots, url, journal)
        node.on_commit.append(server.announce)
        app = node.app()
        detail = f"{store.root}, tables: {', '.join(store.tables()) or 'none'}, {node.backend.name} kernels"
    elif kind == "mysql":
        backend = MysqlBackend(args.mysql_url or config.region.mysql_url, slots)
        backend.check()
        server = NodeServer(args.name, backend, slots, "", journal)
        app = _status_app(args.name)
        detail = f"MariaDB {backend.engine.url.render_as_string(hide_password=True)}"
    elif kind == "simulation":
        scale = args.time_scale if args.time_scale is not None else config.simulation.time_scale
        server = NodeServer(args.name, SimulationBackend(config.simulation.query_types(), scale), slots, "", journal)
        app = _status_app(args.name)
        detail = f"simulation, {scale:g} s per simulated second"
    else:
        raise ConfigError(f"--kind must be native, mysql or simulation, not {kind!r}")
    app.router.add_get("/v1/cluster", server.status_page)
    upstream = _upstream(args, config)
    held = f"{budget / 2**30:.2f} GiB of memory" if budget else "no memory budget"
    print(f"node {args.name}: {kind}, {slots} slots + 1, {held}, {url}, upstream {upstream} ({detail})", flush=True)
    token, tls = config.gateway.cluster_token or None, config.gateway.client_tls()
    drain = functools.partial(server.leave, config.gateway.drain_timeout)
    asyncio.run(serve(app, args.host, args.port, lambda stop: server.run(upstream, token, stop, tls), drain=drain))
    journal.close()
    return 0


def cmd_router(args: argparse.Namespace, config: Config) -> int:
    _logging(config, args.verbose)
    token, tls = config.gateway.cluster_token or None, config.gateway.client_tls()
    journal = Journal(config.gateway.log_dir or None, "router", args.name, config.gateway.log_format)
    router = Router(args.name, token, journal, free_slot_first=config.region.dispatch == "free-slot-first")
    upstream = _upstream(args, config)
    print(f"router {args.name}: http://{args.host}:{args.port}, upstream {upstream}", flush=True)
    drain = functools.partial(router.leave, config.gateway.drain_timeout)
    asyncio.run(
        serve(router.app(), args.host, args.port, lambda stop: router.run(upstream, token, stop, tls), drain=drain)
    )
    journal.close()
    return 0


def served_data(config: Config) -> list[str]:
    """What a native region's nodes serve, one line per node: its data directory, tables and rows."""
    lines = []
    for i, directory in enumerate(config.storage.data):
        store = Store(directory)
        tables = ", ".join(f"{name} ({store.table(name).rows:,} rows)" for name in store.tables())
        lines.append(f"node-{i} serves {store.root}: {tables or 'no tables (load some with `cxg load tpch`)'}")
    return lines


def cmd_up(args: argparse.Namespace, config: Config) -> int:
    """Start the region, or every region of a file of several (each on its own ports), and keep
    their processes running until Ctrl-C."""
    interrupt_on_sigterm()
    config_args = (["--config", str(args.config)] if args.config else []) + [x for s in args.set for x in ("--set", s)]
    run_dir = Path(args.run_dir) if args.run_dir else None
    if config.regions:
        started = {
            name: LocalRegion(
                load_config(args.config, args.set, name),
                [*config_args, "--region", name],
                run_dir / name if run_dir else None,
            )
            for name in config.regions
        }
    else:
        started = {"": LocalRegion(config, config_args, run_dir)}
    try:
        for name, region in started.items():
            with console.status(f"starting region {name or config.gateway.region}"):
                region.start(timeout=args.timeout)
    except BaseException as e:  # the regions started so far stopped too (stopping one not started is nothing)
        for region in started.values():
            region.stop()
        if isinstance(e, KeyboardInterrupt):
            return 130
        raise
    try:  # every region is up: Ctrl-C or SIGTERM from here on, even while it is reported, is a stop
        for name, region in started.items():
            _started(region, name)
        if config.regions:
            console.print(f"balancing between the regions: {config.balancing.method}")
        console.print("Ctrl-C stops it; a process that exits is started again")
        while True:
            for name, region in started.items():
                for event in region.supervise():
                    event = f"{name}: {event}" if name else event
                    console.print(event, soft_wrap=True, highlight=False, markup=False)
            time.sleep(0.25)
    except KeyboardInterrupt:
        console.print("stopping")
        return 0
    finally:
        for region in started.values():
            region.stop()


def _started(region: LocalRegion, name: str) -> None:
    """What `cxg up` says of a region that has started."""
    config = region.config
    label = f"region {name} ({config.gateway.region})" if name else f"region {config.gateway.region}"
    console.print(f"{label} is up at [bold]{region.url}[/] (process output in {region.run_dir})")
    show_status(Client(region.url, region.token(), ca=config.gateway.tls_ca or None).cluster())
    if config.region.backend == "native":
        for line in served_data(config):
            console.print(line, soft_wrap=True, highlight=False, markup=False)
        if config.spark.warm_up:
            console.print(
                f"Spark ({config.spark.master}) is starting in the gateway, in the background: "
                "the first join query waits until it is ready"
            )


def cmd_balance_regions(args: argparse.Namespace, config: Config) -> int:
    _logging(config, args.verbose)
    if not config.regions:
        raise ConfigError("cxg balance-regions needs a file of several regions ([regions.NAME] tables)")
    balancer = CentralBalancer(config)
    b = config.balancing
    port = args.port or b.port
    print(f"central balancer: http://{b.host}:{port}, regions {', '.join(config.regions)}, every {b.poll:g} s")
    asyncio.run(serve(balancer.app(), b.host, port, balancer.run))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gateway", help="run the gateway: SQL over HTTP and the region's balancer")
    p.set_defaults(func=cmd_gateway)

    p = sub.add_parser(
        "up",
        help="start a local region (or every region of a file of several): gateway, routers and nodes as processes; "
        "Ctrl-C stops it",
    )
    p.add_argument("--run-dir", help="where the processes' output goes (default: a new temporary directory)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for all nodes to join")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser(
        "balance-regions", help="run the central balancer between regions (balancing.method = centralized)"
    )
    p.add_argument("--port", type=int, help="default balancing.port")
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(func=cmd_balance_regions)

    p = sub.add_parser("node", help="run a node: K slots + 1 buffered query, on storage, MariaDB or simulated")
    p.add_argument("--kind", choices=("native", "mysql", "simulation"), help="default region.backend")
    p.add_argument("--name", default="node-0", help="node name (default node-0)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    p.add_argument(
        "--advertise",
        metavar="HOST",
        help="the address the gateway and Spark's executors reach it on (default --host; for 0.0.0.0 this host's name)",
    )
    p.add_argument("--port", type=int, default=8101)
    p.add_argument("--upstream", metavar="URL", help="router or gateway to join (default: the configured gateway)")
    p.add_argument("--slots", type=int, help="K, queries at once (default region.slots, else the cores)")
    p.add_argument("--data", metavar="DIR", help="native: the data directory (default: the first storage.data)")
    p.add_argument("--scan-slots", type=int, help="native: concurrent scans (default: the cores)")
    p.add_argument(
        "--threads",
        type=int,
        help="native, --processes 0: worker threads per scan (default: the cores shared by the running scans)",
    )
    p.add_argument(
        "--processes",
        type=int,
        help="native, CPU kernels: worker processes for long scans (default storage.scan_processes, 0: threads)",
    )
    p.add_argument("--backend", choices=("auto", "numpy", "cupy"), help="native: kernels (default storage.backend)")
    p.add_argument(
        "--memory",
        metavar="SIZE",
        help="private memory the node process may hold (its scan workers: a third each): a size, auto or none "
        "(default storage.node_memory)",
    )
    p.add_argument("--mysql-url", metavar="URL", help="mysql: the database (default region.mysql_url)")
    p.add_argument("--time-scale", type=float, help="simulation: real seconds per simulated second")
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(func=cmd_node)

    p = sub.add_parser("router", help="run a router: one upstream link for a group of nodes")
    p.add_argument("--name", default="router-0")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8201)
    p.add_argument("--upstream", metavar="URL", help="the gateway to join (default: the configured gateway)")
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(func=cmd_router)
