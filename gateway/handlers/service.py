"""The service itself, for operators and tools: liveness (/healthz), readiness (/readyz: 503
until a node has joined), Prometheus metrics (/metrics) and the OpenAPI document. None of them
needs a token, so probes and scrapers need no secret."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from balancer import RegionBalancer
from gateway.metrics import Metrics
from gateway.openapi import document


@dataclass(eq=False)
class ServiceHandlers:
    balancer: RegionBalancer
    metrics: Metrics

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
        ready = nodes > 0
        return web.json_response({"ready": ready, "nodes": nodes}, status=200 if ready else 503)

    async def metrics_page(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), content_type="text/plain", charset="utf-8")

    async def openapi(self, request: web.Request) -> web.Response:
        return web.json_response(document())
