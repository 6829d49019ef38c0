"""A region's queue as balancing weighs it, and its report when that weight stays high.

`QueueView.summary()` is the queue as the methods of `regions.balancing` take it: per queued
query its volume V_σ and expected seconds (simulation nodes: Tables 5.6 and 5.5 by the query's
tag; native nodes: the millions of rows of the tables it reads and the region's mean execution
time), the servers and what runs on them. The other regions read it (`GET /v1/regions/queue`).

`OverloadWatch` reads the weight every second, as the queued volume per server (the per-server
reading of W_r: the printed one is a mean per queued query, which does not grow with the load),
and reports the region overloaded once it has stayed above `region.overload_weight` for
`region.overload_seconds`: a warning in the gateway's log saying what to do, `GET
/v1/regions/load` and the `cxg_region_overloaded` gauge; the report ends when the weight falls
back. By default (weight 0, 30 s) that is a queue that has not been empty for 30 seconds.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client.core import GaugeMetricFamily

from balancer import NodeState
from gateway import Gateway
from regions.balancing import RegionQueue, Scale, Waiting, weight_per_server
from regions.config import Config

log = logging.getLogger("cxg.regions")
LIVE_SCALE = Scale(1.0, 1)  # the weights' normalizers change no method's choice: any unit does
DEFAULT_SECONDS = 1.0  # a query's expected time before any has finished here
LOOK_EVERY_S = 1.0  # how often the overload watch reads the weight


class QueueView:
    """One region's queue, weighed."""

    def __init__(self, config: Config, gateway: Gateway):
        self.config = config
        self.gateway = gateway
        self._sim = config.simulation.query_types() if config.region.backend == "simulation" else None

    @property
    def number(self) -> int:
        return self.config.gateway.region

    def summary(self) -> dict[str, Any]:
        """This region's queue as the methods weigh it."""
        balancer = self.gateway.balancer
        seconds = self._mean_seconds()
        queue = []
        for statement, planned in self.gateway.lifecycle.waiting():
            volume, expected = self._estimate(statement.tag, planned.catalog, planned.tables, seconds)
            origin = self.config.regions.get(statement.origin)
            queue.append([volume, expected, origin.number if origin else self.number])
        return {
            "region": self.config.name or str(self.number),
            "number": self.number,
            "servers": max(1, sum(info.slots for info in balancer.nodes())),
            "running": len(balancer.in_flight),
            "finished": balancer.counters["completed"],  # queries its nodes finished so far
            "mean_seconds": seconds,
            # queries its nodes can take now: free slots and empty one-query buffers (none while drained)
            "room": 0 if balancer.draining else sum(_room(s) for s in balancer.pool.node_states().values()),
            "draining": balancer.draining,  # it admits nothing: it pulls nothing either
            "queue": queue,
        }

    def _estimate(self, tag: str, catalog: Any, tables: frozenset[str], seconds: float) -> tuple[float, float]:
        """V_σ and the expected seconds of a queued query: its simulated type's (Tables 5.6 and 5.5
        for the TPC-H types), else the millions of rows of the tables it reads (1 when they are not
        known) and this region's mean time."""
        if self._sim is not None and tag in self._sim:
            kind = self._sim[tag]
            return kind.volume, kind.seconds * self.config.simulation.time_scale
        if catalog is None:
            return 1.0, seconds
        return sum(catalog.table(name).rows for name in tables) / 1e6, seconds

    def _mean_seconds(self) -> float:
        times = [s.timings["execute"] for s in self.gateway.statements.recent(50) if "execute" in s.timings]
        return statistics.fmean(times) if times else DEFAULT_SECONDS


def _room(node: NodeState) -> int:
    """Queries a node can take now: its free slots and empty buffer, none while it drains."""
    return 0 if node.draining else max(0, node.slots + 1 - node.running - node.buffered)


def region_queue(summary: dict[str, Any]) -> RegionQueue:
    """A region's queue as the methods of `regions.balancing` take it, from its summary."""
    queue = RegionQueue(summary["number"], summary["servers"])
    for volume, seconds, origin in summary["queue"]:
        queue.push(Waiting(origin, volume, seconds))
    queue.committed = summary["running"] * summary["mean_seconds"] / 2  # half done, on average
    return queue


@dataclass(eq=False)
class OverloadWatch:
    """Reports the region overloaded while its weight stays above a threshold (see the module)."""

    view: QueueView
    threshold: float
    seconds: float
    weight: float = 0.0
    above_since: float | None = None  # time.monotonic() of the first look above, in the current run
    overloaded: bool = False
    reports: int = 0  # times the region became overloaded
    _task: asyncio.Task | None = field(default=None, repr=False)

    def look(self, now: float | None = None) -> bool:
        """Read the weight once; whether the region is overloaded now."""
        now = time.monotonic() if now is None else now
        self.weight = weight_per_server(region_queue(self.view.summary()), LIVE_SCALE)
        if self.weight <= self.threshold:
            if self.overloaded:
                log.info("region %s is no longer overloaded (queue weight %.3g)", self.view.number, self.weight)
            self.above_since, self.overloaded = None, False
            return False
        self.above_since = now if self.above_since is None else self.above_since
        if not self.overloaded and now - self.above_since >= self.seconds:
            self.overloaded = True
            self.reports += 1
            log.warning(
                "region %s is overloaded: its queue weight (queued volume per server) has stayed above %.3g for "
                "%.0f s (now %.3g); start another node (cxg node --upstream %s ...) and move buckets to it "
                "(cxg redistribute --rebalance)",
                self.view.number,
                self.threshold,
                now - self.above_since,
                self.weight,
                self.view.config.gateway.url,
            )
        return self.overloaded

    def report(self) -> dict[str, Any]:
        above = 0.0 if self.above_since is None else time.monotonic() - self.above_since
        return {
            "region": self.view.number,
            "weight": self.weight,
            "threshold": self.threshold,
            "seconds": self.seconds,
            "above_for": above,
            "overloaded": self.overloaded,
            "reports": self.reports,
        }

    def collect(self):
        yield GaugeMetricFamily("cxg_region_weight", "The queue weight W_r (queued volume per server)", self.weight)
        yield GaugeMetricFamily(
            "cxg_region_overloaded",
            "1 while the queue weight has stayed above region.overload_weight for region.overload_seconds",
            int(self.overloaded),
        )

    def install(self, app: web.Application, gateway: Gateway) -> None:
        app.router.add_get("/v1/regions/load", self.page)
        gateway.metrics.registry.register(self)
        app.on_startup.append(self._start)
        app.on_shutdown.append(self._stop)

    async def page(self, request: web.Request) -> web.Response:
        self.view.gateway.auth.identify(request)
        return web.json_response(self.report())

    async def _start(self, app: web.Application) -> None:
        if self.seconds <= 0:  # reporting is off
            return

        async def watch() -> None:
            while True:
                await asyncio.sleep(LOOK_EVERY_S)
                try:
                    self.look()
                except Exception:
                    log.exception("reading the region's queue weight failed")

        self._task = asyncio.create_task(watch())

    async def _stop(self, app: web.Application) -> None:
        if self._task is not None:
            self._task.cancel()
