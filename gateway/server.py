"""The gateway: SQL over HTTP in front of one region.

This module is the composition root: it builds the region's balancer, the executor for its kind
of nodes, the statements and their lifecycle, and puts the handlers of `gateway.handlers`
(one module per resource, each listing its routes) into one application. Errors are translated in
one place (`gateway.errors`). The balancer's links (routers, nodes) arrive on /v1/cluster/connect.
Clients read the endpoints in docs/http-api.md, which a test holds to the routes served and to
the OpenAPI document (`gateway.openapi`).
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from balancer import Journal, RegionBalancer, settled
from gateway.auth import Auth
from gateway.config import GatewayConfig, SparkFactory, SparkSettings, SqlSettings
from gateway.errors import error_middleware
from gateway.executors import Executor, NativeExecutor, PassThroughExecutor
from gateway.handlers.appends import AppendHandlers
from gateway.handlers.console import ConsoleHandlers
from gateway.handlers.region import RegionHandlers
from gateway.handlers.service import ServiceHandlers
from gateway.handlers.statements import StatementHandlers
from gateway.handlers.subscriptions import SubscriptionHandlers
from gateway.handlers.trino import TrinoHandlers
from gateway.lifecycle import StatementLifecycle
from gateway.metrics import Metrics
from gateway.statements import Statements

MAX_REQUEST = 1024 * 1024  # bytes of a request body (the SQL and its parameters): more is 413
log = logging.getLogger("cxg.gateway")


class Gateway:
    """The region's front door, built from its own sections of the configuration (`settings`, the
    region's `spark_settings`, its `sql` settings) and what the region's composer decides for it:
    `spark`, the region's Spark session factory (joins that need it fail without one), the
    `backend` of its nodes, whether the balancer dispatches `free_slot_first`, and the region's
    `name` in a file of several."""

    def __init__(
        self,
        settings: GatewayConfig,
        spark_settings: SparkSettings,
        spark: SparkFactory | None = None,
        *,
        sql: SqlSettings | None = None,
        backend: str = "native",
        free_slot_first: bool = False,
        name: str = "",
    ):
        self.settings = g = settings
        self.backend = backend
        self.balancer = RegionBalancer(
            g.region,
            g.max_queue,
            g.cluster_token or None,
            Journal(g.log_dir or None, "balancer", f"region-{g.region}", g.log_format),
            backend=backend,
            free_slot_first=free_slot_first,
        )
        self.executor: Executor
        if backend == "native":
            joins = (sql or SqlSettings()).joins
            self.executor = NativeExecutor(
                self.balancer, spark_settings, spark, joins=joins, kept=g.subscriptions_file or None
            )
        else:
            self.executor = PassThroughExecutor(self.balancer, backend)
        self.auth = Auth(g.tokens, g.cluster_token)
        self.statements = Statements(g.result_ttl, memory=g.result_memory)
        self.metrics = Metrics(self.balancer, self.statements)
        self.region = name or f"region-{g.region}"
        self.lifecycle = StatementLifecycle(g, self.balancer, self.executor, self.statements, self.metrics, self.region)
        self._watcher: asyncio.Task | None = None

    def app(self) -> web.Application:
        app = web.Application(middlewares=[error_middleware], client_max_size=MAX_REQUEST)
        handlers = (
            StatementHandlers(self.settings, self.auth, self.statements, self.lifecycle),
            TrinoHandlers(self.settings, self.auth, self.statements, self.lifecycle),
            ConsoleHandlers(),
            AppendHandlers(self.settings, self.auth, self.executor),
            SubscriptionHandlers(self.auth, self.executor),
            RegionHandlers(self.backend, self.auth, self.balancer, self.executor, self.statements),
            ServiceHandlers(self.balancer, self.metrics, self.executor),
        )
        for group in handlers:
            app.add_routes(group.routes())
        app.on_startup.append(self._start)
        app.on_shutdown.append(self._stop)
        return app

    async def _watch(self) -> None:
        """Keep the engine's view of the nodes in step with the region's membership."""
        while True:
            self.executor.nodes_changed(self.balancer.nodes())
            await self.balancer.membership_changed()

    async def _start(self, app: web.Application) -> None:
        self.executor.serving(asyncio.get_running_loop())
        self._watcher = asyncio.create_task(self._watch())

    async def leave(self, timeout: float) -> None:
        """Admit no new statement, for good, and wait, `timeout` seconds at most, until those
        admitted (queued, running, moved to another region) have finished: the gateway is told to
        stop. Those still unfinished then are cancelled when it stops."""
        self.balancer.leave()
        region, unfinished = self.balancer.region, len(self.statements.unfinished())
        log.info("region %s drains: %d statement(s) to finish within %g s", region, unfinished, timeout)
        if await settled(lambda: not self.statements.unfinished(), timeout):
            log.info("region %s drained", region)
        else:
            unfinished = len(self.statements.unfinished())
            log.warning("region %s: %d statement(s) unfinished after %g s are cancelled", region, unfinished, timeout)

    async def _stop(self, app: web.Application) -> None:
        await self.lifecycle.cancel_all()
        if self._watcher is not None:
            self._watcher.cancel()
        self.executor.close()
        self.balancer.close()
