"""The router role (seed 004 §4.1): proxies a group of nodes and looks like one big node from
above. It keeps each node's ready flag from the nodes' own status packets, forwards every query
round-robin to the next ready node, and reports "ready" upstream iff one of its nodes is; the
nodes' status packets themselves never travel further. A request pinned to one node (a
multi-node query) goes to that node, and so does a `Drain` for it. A router that is leaving (its
process told to stop) refuses every new query and waits until those it forwarded have ended."""

from __future__ import annotations

import dataclasses
import logging
import time

from aiohttp import web

from balancer.downstream import Downstream, Pool
from balancer.journal import Journal
from balancer.link import Dialler, Link, accept
from balancer.packets import Answer, Cancel, Drain, Hello, Packet, Release, Request, Started, Status
from balancer.service import settled
from balancer.serving import serve_link, serve_member

log = logging.getLogger("cxg.router")


class Router(Dialler):
    def __init__(
        self, name: str, token: str | None = None, journal: Journal | None = None, free_slot_first: bool = False
    ):
        self.name = name
        self.token = token
        self.journal = journal or Journal(None, "router", name)
        self.pool = Pool(free_slot_first=free_slot_first)
        self.upstream: Link | None = None
        self.received = 0
        self._owners: dict[int, tuple[Downstream, Request, float]] = {}
        self._last: Status | None = None
        self.leaving = False  # the process stops once what it forwarded has ended

    def hello(self) -> Hello:
        self.received = 0
        self._last = None
        return Hello(name=self.name, role="router", nodes=self.pool.node_infos())

    def status(self) -> Status:
        nodes = self.pool.node_states()
        if self.leaving:  # its nodes go out of rotation with it
            nodes = {name: dataclasses.replace(s, ready=False, draining=True) for name, s in nodes.items()}
        return Status(ready=self.pool.ready and not self.leaving, received=self.received, nodes=nodes)

    async def leave(self, timeout: float) -> None:
        """Refuse every new query and wait, `timeout` seconds at most, until those forwarded have
        ended (the process is told to stop)."""
        self.leaving = True
        await self._report(force=True)
        if not await settled(lambda: not self._owners, timeout):
            log.warning("%s: %d queries still running after %g s", self.name, len(self._owners), timeout)

    async def _report(self, force: bool = False) -> None:
        status = self.status()
        if self.upstream is not None and (force or self._last is None or status.header() != self._last.header()):
            self._last = status
            await self.upstream.send(status)

    # ---- upstream -------------------------------------------------------------------------------

    async def _from_upstream(self, packet: Packet) -> None:
        if isinstance(packet, Request):
            self.received += 1
            await self._forward(packet)
            await self._report(force=True)
        elif isinstance(packet, (Cancel, Release)):
            owner = self._owners.get(packet.id)
            if owner is not None:
                await owner[0].send(packet)
        elif isinstance(packet, Drain):
            member = self.pool.owner(packet.node)
            if member is not None:
                await member.send(packet)

    async def _forward(self, request: Request) -> None:
        if self.leaving:
            target = None
        elif request.node:
            target = self.pool.owner(request.node)
            target = target if target is not None and target.node_ready(request.node) else None
        else:
            target = self.pool.next_ready()
        if target is None:  # a stale "ready" upstream, or leaving: let the balancer send it again
            busy = Answer(id=request.id, node=self.name, ok=False, code="busy", message="no ready node")
            await self.upstream.send(busy)
            return
        self._owners[request.id] = (target, request, time.perf_counter())
        await target.send(request)

    async def serve_upstream(self, link: Link) -> None:
        async def opened() -> None:
            self.upstream = link
            await self._report(force=True)

        async def closed() -> None:
            self.upstream = None
            owners, self._owners = self._owners, {}
            for query_id, (owner, _, _) in owners.items():  # nobody is waiting for these any more
                await owner.send(Cancel(id=query_id))

        await serve_link(link, self._from_upstream, opened, closed)

    # ---- downstream -----------------------------------------------------------------------------

    async def _serve_node(self, link: Link, hello: Hello) -> None:
        await serve_member(self.pool, link, hello, self._from_node, self._joined, self._left)

    async def _joined(self, member: Downstream) -> None:
        log.info("%s: %s joined with %d node(s)", self.name, member.name, len(member.nodes))
        await self._announce()

    async def _left(self, member: Downstream) -> None:
        for query_id, (owner, _, _) in list(self._owners.items()):
            if owner is member:
                del self._owners[query_id]
                message = f"node {member.name} went away"
                if self.upstream is not None:
                    await self.upstream.send(
                        Answer(id=query_id, node=member.name, ok=False, code="node_lost", message=message)
                    )
        await self._announce()

    async def _from_node(self, member: Downstream, packet: Packet) -> None:
        if isinstance(packet, Hello):  # the node's tables changed
            member.hello = packet
            await self._announce()
        elif isinstance(packet, Status):
            member.status = packet
            await self._report()
        elif isinstance(packet, Started):
            if self.upstream is not None:
                await self.upstream.send(packet)
        elif isinstance(packet, Answer):
            owner = self._owners.pop(packet.id, None)
            if owner is not None:
                _, request, sent = owner
                self.journal.query(
                    packet.id, request.tag, time.perf_counter() - sent, len(packet.payload), 0, packet.node, packet.ok
                )
            if self.upstream is not None:
                await self.upstream.send(packet)

    async def connect(self, request: web.Request) -> web.StreamResponse:
        return await accept(request, self.token, self._serve_node)

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "router": self.name})

    async def cluster(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "router": self.name,
                "upstream": self.upstream is not None,
                "ready": self.pool.ready,
                "in_flight": len(self._owners),
                "nodes": {n: vars(s) for n, s in self.pool.node_states().items()},
            }
        )

    def app(self) -> web.Application:
        app = web.Application()
        app.add_routes(
            [
                web.get("/healthz", self.healthz),
                web.get("/v1/cluster", self.cluster),
                web.get("/v1/cluster/connect", self.connect),
            ]
        )
        return app

    async def _announce(self) -> None:
        """Tell the upstream the group changed: a new `Hello` on the open link, then the status."""
        if self.upstream is not None:
            await self.upstream.send(Hello(name=self.name, role="router", nodes=self.pool.node_infos()))
            await self._report(force=True)
