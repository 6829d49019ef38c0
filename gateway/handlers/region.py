"""The region behind the gateway: its tables (/v1/tables), its queue and nodes (/v1/cluster),
draining the region or one node (/v1/cluster/drain, /v1/cluster/nodes/{node}/drain: POST drains,
DELETE takes back into rotation; the cluster token when one is configured), and the door its
routers and nodes link in through (/v1/cluster/connect, the balancer's)."""

from __future__ import annotations

import asyncio
import functools
import importlib.metadata
import platform
from dataclasses import dataclass

from aiohttp import web

from balancer import RegionBalancer
from gateway.auth import Auth
from gateway.errors import ApiError
from gateway.executors import Executor
from gateway.statements import Statements


@functools.cache
def software_versions() -> dict[str, str | None]:
    """What the gateway runs: cxg, Python, pyarrow and pyspark (None: not installed)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for package in ("cxg", "pyarrow", "pyspark"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return versions


@dataclass(eq=False)
class RegionHandlers:
    backend: str
    auth: Auth
    balancer: RegionBalancer
    executor: Executor
    statements: Statements

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/v1/tables", self.tables),
            web.get("/v1/cluster", self.cluster),
            web.get("/v1/cluster/connect", self.balancer.connect),
            web.post("/v1/cluster/drain", self.drain),
            web.delete("/v1/cluster/drain", self.drain),
            web.post("/v1/cluster/nodes/{node}/drain", self.drain),
            web.delete("/v1/cluster/nodes/{node}/drain", self.drain),
        ]

    async def tables(self, request: web.Request) -> web.Response:
        self.auth.identify(request)
        tables = await asyncio.get_running_loop().run_in_executor(None, self.executor.tables)
        return web.json_response({"tables": tables})

    async def cluster(self, request: web.Request) -> web.Response:
        self.auth.identify(request)
        spark = await asyncio.get_running_loop().run_in_executor(None, self.executor.spark)
        states = dict(self.statements.totals)
        for statement in self.statements.unfinished():
            states[statement.state] = states.get(statement.state, 0) + 1
        return web.json_response(
            {
                "backend": self.backend,
                "statements": states,
                "versions": software_versions(),
                "spark": spark,
                **self.balancer.snapshot(),
            }
        )

    async def drain(self, request: web.Request) -> web.Response:
        """Drain (POST) or undrain (DELETE) the region or one node; the drain state after."""
        self.auth.operator(request)
        node = request.match_info.get("node")
        try:
            await self.balancer.drain(request.method == "POST", node)
        except KeyError:
            raise ApiError(404, "node_not_found", f"no node {node} in region {self.balancer.region}", "42704") from None
        return web.json_response(
            {
                "region": self.balancer.region,
                "draining": self.balancer.draining,
                "draining_nodes": self.balancer.draining_nodes(),
            }
        )
