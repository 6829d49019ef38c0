"""The central inter-regional balancer of the centralized method (seed 004 §5.2), live: every
`poll` seconds it reads every region's queue, computes the moves `regions.balancing.Centralized`
makes (from the tail of each queue heavier than the mean to the lightest) once for each query the
regions finished since the last look (the published balancer acts on each weight report a finished
query sends), and tells each target region to pull that many queries from the source's tail. It
holds no query: when it dies, queries stay queued where they are and run there, and nothing else
changes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter

import aiohttp
from aiohttp import web

from regions.balancing import Centralized, method
from regions.config import Config
from regions.interregional import cluster_session, queue_of
from regions.region_load import LIVE_SCALE, region_queue

log = logging.getLogger("cxg.regions")
MAX_REPORTS = 100  # weight reports acted on in one round


class CentralBalancer:
    def __init__(self, config: Config):
        self.config = config
        self.method: Centralized = method("centralized", config.balancing.weight, LIVE_SCALE)
        self.by_number = {peer.number: peer for peer in config.regions.values()}
        self.moves: Counter[tuple[str, str]] = Counter()  # (source, target) -> queries it had moved
        self.rounds = 0
        self.finished: dict[str, int] = {}  # region -> queries finished when last read

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self.health)
        return app

    async def health(self, request: web.Request) -> web.Response:
        moves = [{"source": s, "target": t, "queries": n} for (s, t), n in sorted(self.moves.items())]
        return web.json_response({"status": "ok", "rounds": self.rounds, "moves": moves})

    async def run(self, stop: asyncio.Event) -> None:
        async with cluster_session(self.config) as session:
            while not stop.is_set():
                try:
                    await self.round(session)
                except Exception:
                    log.exception("a balancing round failed")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.config.balancing.poll)

    async def round(self, session: aiohttp.ClientSession) -> None:
        """One look at every region, and the pulls that equalize their weights."""
        self.rounds += 1
        summaries = await asyncio.gather(*(queue_of(session, p.url) for p in self.config.regions.values()))
        summaries = [s for s in summaries if s is not None]
        queues = [region_queue(s) for s in summaries]
        if len(queues) < 2:
            return
        # the published balancer acts on every weight report, one per query finished: as many times
        # as queries finished since the last round (at least once)
        reports = sum(s["finished"] - self.finished.get(s["region"], s["finished"]) for s in summaries)
        self.finished.update({s["region"]: s["finished"] for s in summaries})
        planned: Counter[tuple[int, int]] = Counter()
        for _ in range(min(max(1, reports), MAX_REPORTS)):
            planned.update((m.source, m.target) for m in self.method.rebalance(queues))
        for (source, target), count in planned.items():
            body = {"source": self.by_number[source].name, "count": count, "end": "tail"}
            try:
                async with session.post(f"{self.by_number[target].url}/v1/regions/pull", json=body) as answer:
                    answer.raise_for_status()
                    pulled = (await answer.json())["pulled"]
            except (aiohttp.ClientError, TimeoutError, ValueError) as e:
                log.info("region %s could not pull from %s: %s", self.by_number[target].name, body["source"], e)
                continue
            self.moves[(body["source"], self.by_number[target].name)] += pulled
