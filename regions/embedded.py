"""A region in one process: the gateway, routers and nodes on one background event loop. The
links between them are real WebSockets over loopback and the roles are the same code that
runs as separate processes (`cxg up`); tests and examples use it to start in milliseconds."""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from balancer import NodeServer, Router
from gateway import Gateway, free_port
from regions.config import Config
from regions.region_gateway import gateway_app, region_gateway
from regions.spark_session import session_factory


@dataclass
class EmbeddedRegion:
    config: Config
    nodes: list[NodeServer] = field(default_factory=list)
    routers: dict[str, list[str]] = field(default_factory=dict)  # router name -> names of its nodes

    def __post_init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="embedded-region")
        self._runners: list[web.AppRunner] = []
        self._stop: asyncio.Event | None = None
        self._tasks: list[asyncio.Task] = []
        self.router_objects: dict[str, Router] = {}
        self.gateway: Gateway | None = None

    @property
    def url(self) -> str:
        return self.config.gateway.url_on("127.0.0.1")

    def call(self, work: Awaitable[Any], timeout: float = 60.0) -> Any:
        """Await `work` (a coroutine or a future of this loop) on the region's loop; its result."""

        async def wrapped() -> Any:
            return await work

        return asyncio.run_coroutine_threadsafe(wrapped(), self.loop).result(timeout)

    async def _serve(self, app: web.Application, port: int, tls: ssl.SSLContext | None = None) -> None:
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port, ssl_context=tls).start()
        self._runners.append(runner)

    async def _start(self) -> None:
        self._stop = asyncio.Event()
        token = self.config.gateway.cluster_token or None
        spark = session_factory(self.config.spark, f"region-{self.config.gateway.region}")
        self.gateway = region_gateway(self.config, spark)
        await self._serve(
            gateway_app(self.config, self.gateway), self.config.gateway.port, self.config.gateway.server_tls()
        )
        tls = self.config.gateway.client_tls()
        upstream = {node.name: self.url for node in self.nodes}
        for name, members in self.routers.items():
            router = Router(name, token, free_slot_first=self.config.region.dispatch == "free-slot-first")
            port = free_port()
            await self._serve(router.app(), port)
            self._tasks.append(asyncio.create_task(router.run(self.url, token, self._stop, tls)))
            self.router_objects[name] = router
            upstream.update({member: f"http://127.0.0.1:{port}" for member in members})
        for node in self.nodes:
            self._tasks.append(asyncio.create_task(node.run(upstream[node.name], token, self._stop, tls)))

    async def _ready(self, timeout: float) -> None:
        deadline = self.loop.time() + timeout
        while len(self.gateway.balancer.nodes()) < len(self.nodes) or not self.gateway.balancer.settled():
            if self.loop.time() > deadline:
                raise TimeoutError(f"only {len(self.gateway.balancer.nodes())} of {len(self.nodes)} nodes joined")
            await asyncio.sleep(0.01)

    def start(self, timeout: float = 30.0) -> str:
        if self.config.gateway.port == 0:
            self.config.gateway.port = free_port()
        self._thread.start()
        self.call(self._start())
        self.call(self._ready(timeout), timeout + 5)
        return self.url

    async def _shutdown(self) -> None:
        self._stop.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for runner in reversed(self._runners):
            await runner.cleanup()

    def stop(self) -> None:
        self.call(self._shutdown())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    def __enter__(self) -> EmbeddedRegion:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
