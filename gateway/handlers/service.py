"""The service itself, for operators and tools: liveness (/healthz), readiness (/readyz: 503
until a node has joined, while the region drains, a table is not fully served or Spark is down),
Prometheus metrics (/metrics, listed in docs/metrics.md) and the OpenAPI document. None of them
needs a token, so probes and scrapers need no secret."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from aiohttp import web

from balancer import RegionBalancer
from gateway.executors import Executor
from gateway.metrics import Metrics
from gateway.openapi import document


@dataclass(eq=False)
class ServiceHandlers:
    balancer: RegionBalancer
    metrics: Metrics
    executor: Executor

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/healthz", self.healthz),
            web.get("/readyz", self.readyz),
            web.get("/metrics", self.metrics_page),
            web.get("/openapi.json", self.openapi),
        ]

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(self, request: web.Request) -> web.Response:
        nodes = len(self.balancer.nodes())
        problems = await asyncio.get_running_loop().run_in_executor(None, self.executor.health) if nodes else {}
        if self.balancer.draining:
            problems["draining"] = True
        ready = nodes > 0 and not problems
        return web.json_response({"ready": ready, "nodes": nodes, **problems}, status=200 if ready else 503)

    async def metrics_page(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), content_type="text/plain", charset="utf-8")

    async def openapi(self, request: web.Request) -> web.Response:
        return web.json_response(document())
