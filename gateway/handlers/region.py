"""The region behind the gateway: its tables (/v1/tables), its queue and nodes (/v1/cluster),
and the door its routers and nodes link in through (/v1/cluster/connect, the balancer's)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from aiohttp import web

from balancer import RegionBalancer
from gateway.auth import Auth
from gateway.executors import Executor
from gateway.statements import Statements


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
        ]

    async def tables(self, request: web.Request) -> web.Response:
        self.auth.identify(request)
        tables = await asyncio.get_running_loop().run_in_executor(None, self.executor.tables)
        return web.json_response({"tables": tables})

    async def cluster(self, request: web.Request) -> web.Response:
        self.auth.identify(request)
        states = dict(self.statements.totals)
        for statement in self.statements.unfinished():
            states[statement.state] = states.get(statement.state, 0) + 1
        return web.json_response({"backend": self.backend, "statements": states, **self.balancer.snapshot()})
