"""`cxg node` and `cxg router`: one role per process, dialling its upstream over the network."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os

from aiohttp import web

from balancer.journal import Journal
from balancer.router import Router
from balancer.server import NodeServer
from balancer.service import serve
from gateway.config import Config, ConfigError


def _upstream(args: argparse.Namespace, config: Config) -> str:
    return args.upstream or f"http://{config.gateway.host}:{config.gateway.port}"


def _logging(args: argparse.Namespace) -> None:
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def _status_app(name: str) -> web.Application:
    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "node": name})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    return app


def cmd_node(args: argparse.Namespace, config: Config) -> int:
    _logging(args)
    kind = args.kind or config.region.backend
    slots = args.slots or config.region.slots or os.cpu_count() or 1
    journal = Journal(config.gateway.log_dir or None, "node", args.name)
    url = f"http://{args.host}:{args.port}"
    if kind == "native":
        from balancer.native_backend import NativeBackend
        from gpu_kernels.backend import get_backend
        from storage.node import Node
        from storage.store import Store

        store = Store(args.data or config.storage.data[0], node=args.name)
        backend = get_backend(args.backend or config.storage.backend)
        node = Node(store, backend, args.scan_slots, args.threads, args.processes)
        server = NodeServer(args.name, NativeBackend(store), slots, url, journal)
        node.on_commit.append(server.announce)
        app = node.app()
        detail = f"{store.root}, tables: {', '.join(store.tables()) or 'none'}, {node.backend.name} kernels"
    elif kind == "mysql":
        from balancer.mysql_backend import MysqlBackend

        backend = MysqlBackend(args.mysql_url or config.region.mysql_url, slots)
        backend.check()
        server = NodeServer(args.name, backend, slots, "", journal)
        app = _status_app(args.name)
        detail = f"MariaDB {backend.engine.url.render_as_string(hide_password=True)}"
    elif kind == "simulation":
        from balancer.simulation import SimulationBackend

        scale = args.time_scale if args.time_scale is not None else config.simulation.time_scale
        server = NodeServer(args.name, SimulationBackend(config.simulation.query_types(), scale), slots, "", journal)
        app = _status_app(args.name)
        detail = f"simulation, {scale:g} s per simulated second"
    else:
        raise ConfigError(f"--kind must be native, mysql or simulation, not {kind!r}")
    app.router.add_get("/v1/cluster", server.status_page)
    upstream = _upstream(args, config)
    print(f"node {args.name}: {kind}, {slots} slots + 1 buffer, {url}, upstream {upstream} ({detail})", flush=True)
    token = config.gateway.cluster_token or None
    asyncio.run(serve(app, args.host, args.port, lambda stop: server.run(upstream, token, stop)))
    journal.close()
    return 0


def cmd_router(args: argparse.Namespace, config: Config) -> int:
    _logging(args)
    token = config.gateway.cluster_token or None
    journal = Journal(config.gateway.log_dir or None, "router", args.name)
    router = Router(args.name, token, journal)
    router.pool.free_slot_first = config.region.dispatch == "free-slot-first"
    upstream = _upstream(args, config)
    print(f"router {args.name}: http://{args.host}:{args.port}, upstream {upstream}", flush=True)
    asyncio.run(serve(router.app(), args.host, args.port, lambda stop: router.run(upstream, token, stop)))
    journal.close()
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("node", help="run a node: K slots + 1 buffered query, on storage, MariaDB or simulated")
    p.add_argument("--kind", choices=("native", "mysql", "simulation"), help="default region.backend")
    p.add_argument("--name", default="node-0", help="node name (default node-0)")
    p.add_argument("--host", default="127.0.0.1")
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
        help="native, CPU kernels: worker processes for long scans (default: the cores; 0: threads instead)",
    )
    p.add_argument("--backend", choices=("auto", "numpy", "cupy"), help="native: kernels (default storage.backend)")
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
