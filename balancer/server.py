"""The node role (PerformSys *server*, seed 004 §4.1): K slots and a one-query buffer B.

A request goes to the first free slot; with every slot busy it waits in B; with B full too the
node answers `busy` (its upstream sends it again later). After every request and every change
the node tells its upstream "ready" (a slot is free or B is empty) or "refuse". When a slot
frees, the buffered query starts in it at once, before anything is sent upstream, so no core
idles while the next query travels.

What a slot does with a query is the backend's business (`Backend.execute`): the MariaDB
backend runs the SQL unchanged on one of its K connections, the simulation backend sleeps and
answers random rows. A `lease` request runs nothing: the slot is held until the coordinator
sends `Release`, which is how queries executed by the region's engine on native storage nodes
take a slot on every node they read.

A drained node (`Drain` from upstream, or `leave` when the process is told to stop) refuses every
new query (status "refuse", and `busy` to a request already on its way), while its running and
buffered queries go on to their end.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from aiohttp import web

from balancer.journal import Journal, client_of
from balancer.link import Dialler, Link
from balancer.logs import logged_as
from balancer.packets import (
    Answer,
    Cancel,
    Drain,
    Hello,
    NodeInfo,
    NodeState,
    Packet,
    Release,
    Request,
    Started,
    Status,
)
from balancer.service import settled
from balancer.serving import serve_link

log = logging.getLogger("cxg.server")


class Backend(Protocol):
    name: str

    def info(self) -> dict[str, int]:
        """Tables and their rows (DataBaseInfoPacket)."""

    async def execute(self, request: Request) -> Answer:
        """Run one query; cancelling the awaiting task must stop it."""


class NodeServer(Dialler):
    def __init__(
        self,
        name: str,
        backend: Backend,
        slots: int,
        url: str = "",
        journal: Journal | None = None,
    ):
        if slots < 1:
            raise ValueError("a node needs at least one slot")
        self.name = name
        self.backend = backend
        self.url = url
        self.journal = journal or Journal(None, "node", name)
        self.slots: list[Request | None] = [None] * slots
        self._free = list(range(slots - 1, -1, -1))  # free slot numbers, the lowest last
        self.buffer: Request | None = None
        self.received = 0
        self.link: Link | None = None
        self.completed = 0
        self._tasks: dict[int, asyncio.Task] = {}
        self._leases: dict[int, asyncio.Event] = {}
        self._last: Status | None = None
        self.draining = False  # takes no new query
        self._leaving = False  # the process stops once idle: drained for good

    # ---- state ----------------------------------------------------------------------------------

    @property
    def running(self) -> int:
        return len(self.slots) - len(self._free)

    @property
    def ready(self) -> bool:
        return not self.draining and (self.running < len(self.slots) or self.buffer is None)

    @property
    def idle(self) -> bool:
        return self.running == 0 and self.buffer is None

    def state(self) -> NodeState:
        return NodeState(
            ready=self.ready,
            slots=len(self.slots),
            running=self.running,
            buffered=int(self.buffer is not None),
            draining=self.draining,
        )

    def info(self) -> NodeInfo:
        return NodeInfo(self.name, self.backend.name, len(self.slots), self.url, self.backend.info())

    def hello(self) -> Hello:
        self.received = 0
        self._last = None
        return Hello(name=self.name, role="node", nodes=[self.info()])

    async def announce(self) -> None:
        """Tell the upstream what the node holds now (after a load)."""
        await self._send(Hello(name=self.name, role="node", nodes=[self.info()]))

    async def status_page(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "node": self.name,
                "backend": self.backend.name,
                "upstream": self.link is not None,
                "completed": self.completed,
                **vars(self.state()),
            }
        )

    # ---- the algorithm --------------------------------------------------------------------------

    async def handle(self, packet: Packet) -> None:
        if isinstance(packet, Request):
            self.received += 1
            await self._admit(packet)
        elif isinstance(packet, Cancel):
            await self._cancel(packet.id)
        elif isinstance(packet, Release):
            lease = self._leases.get(packet.id)
            if lease is not None:
                lease.set()
        elif isinstance(packet, Drain):
            await self.drain(packet.on)

    async def drain(self, on: bool = True) -> None:
        """Take no new query (`on`), or take them again; the running and buffered ones go on either
        way. A node that is leaving stays drained."""
        self.draining = on or self._leaving
        await self._status(force=True)

    async def leave(self, timeout: float) -> None:
        """Drain for good and wait, `timeout` seconds at most, until the running and buffered
        queries have ended (the process is told to stop)."""
        self._leaving = True
        await self.drain()
        if not await settled(lambda: self.idle, timeout):
            log.warning("node %s: %d queries still running after %g s", self.name, self.running, timeout)

    async def _admit(self, request: Request) -> None:
        if self.draining:
            await self._send(Answer(id=request.id, node=self.name, ok=False, code="busy", message="node is draining"))
        elif self._free:
            await self._start(self._free.pop(), request)
        elif self.buffer is None:
            self.buffer = request
            self.journal.queue(client_of(request.id), 1)
        else:
            await self._send(Answer(id=request.id, node=self.name, ok=False, code="busy", message="node is full"))
        await self._status(force=True)

    async def _start(self, slot: int, request: Request) -> None:
        self.slots[slot] = request
        if request.lease:
            self._leases[request.id] = asyncio.Event()
        with logged_as(request.id):
            self._tasks[request.id] = asyncio.create_task(self._execute(slot, request))
        await self._send(Started(id=request.id, node=self.name))

    async def _execute(self, slot: int, request: Request) -> None:
        started = time.perf_counter()
        try:
            if request.lease:
                await self._leases[request.id].wait()
                answer = Answer(id=request.id, node=self.name)
            else:
                answer = await self.backend.execute(request)
        except asyncio.CancelledError:
            answer = Answer(id=request.id, node=self.name, ok=False, code="cancelled", message="query cancelled")
        except Exception as e:  # a backend failure answers the query, it never kills the node
            log.exception("query %s failed on %s", request.id, self.name)
            answer = Answer(id=request.id, node=self.name, ok=False, code="execution_error", message=str(e))
        answer.node = self.name
        answer.seconds = time.perf_counter() - started
        # free the slot and start the buffered query before anything goes upstream
        self.slots[slot] = None
        self._free.append(slot)
        self._tasks.pop(request.id, None)
        self._leases.pop(request.id, None)
        self.completed += 1
        promoted = self.buffer
        if promoted is not None:
            self.buffer = None
            await self._start(self._free.pop(), promoted)
        await self._send(answer)
        self.journal.query(
            request.id, request.tag, answer.seconds, len(answer.payload), int(self.buffer is not None), ok=answer.ok
        )
        if promoted is not None:
            self.journal.queue(client_of(promoted.id), 0)
        await self._status()

    async def _cancel(self, query_id: int) -> None:
        if self.buffer is not None and self.buffer.id == query_id:
            self.buffer = None
            await self._send(Answer(id=query_id, node=self.name, ok=False, code="cancelled", message="query cancelled"))
            await self._status()
            return
        task = self._tasks.get(query_id)
        if task is not None:
            _stop(task)

    async def _send(self, packet: Packet) -> None:
        if self.link is not None:
            await self.link.send(packet)

    async def _status(self, force: bool = False) -> None:
        status = Status(ready=self.ready, received=self.received, nodes={self.name: self.state()})
        if force or self._last is None or status.header() != self._last.header():
            self._last = status
            await self._send(status)

    # ---- the link upstream ----------------------------------------------------------------------

    async def serve_upstream(self, link: Link) -> None:
        """Talk to the upstream on `link` until it goes away; then nothing it sent survives."""

        async def opened() -> None:
            self.link = link
            await self._status(force=True)

        async def closed() -> None:
            self.link = None
            self.buffer = None
            for task in list(self._tasks.values()):
                _stop(task)

        await serve_link(link, self.handle, opened, closed)


def _stop(task: asyncio.Task) -> None:
    """Cancel a query's task once it has taken its first step: cancelled before, it would never run
    the clean-up that frees its slot (a `Cancel` right behind its `Request`)."""
    asyncio.get_running_loop().call_soon(task.cancel)
