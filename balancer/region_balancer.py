"""The balancer role (seed 004 §4.1): the region's FIFO queue of client queries.

The head of the queue goes to the next ready router or node, round-robin (k := k + 1 over the
M members below); when all of them refuse, dispatching stops until a status packet says one is
ready again. A query's id is global·10^8 + region·10^6 + client.

A query that must read a hash-partitioned table takes a slot on every node holding it: it
waits at the head until each of those nodes is ready, then goes to all of them at once (as a
lease: the region's engine runs it and then releases the slots). A query on replicated data
goes to one node, like every PerformSys query.

Draining takes the region, or one node, out of rotation: a drained region admits no new query
(`check_open`: 503 `draining`) while its queued and running ones go on; a drained node is skipped
when dispatching and refuses new queries itself, while its running and buffered ones go on. A query
that must hold a slot on a drained node fails at once with `node_draining` rather than wait at
the head of the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from balancer.downstream import Downstream, Pool
from balancer.journal import Journal, client_of
from balancer.link import Link, accept
from balancer.packets import Answer, Cancel, Drain, Hello, NodeInfo, Packet, Release, Request, Started, Status
from balancer.service import settled
from balancer.serving import serve_member

log = logging.getLogger("cxg.balancer")


class DispatchFailed(Exception):
    """A query the balancer took ended without a result: `code` says why (cancelled, busy,
    node_lost, execution_error, or the code a backend reported). Named apart from the SQL
    layer's `InvalidQuery`, which is a query's own fault."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


class Overloaded(DispatchFailed):
    """Not admitted: the queue is full, or no node is connected."""


class HandedOver(DispatchFailed):
    """Taken out of the queue to run in another region (balancing between regions)."""

    def __init__(self, region: str):
        super().__init__("moved", f"handed over to region {region}")
        self.region = region


def query_id(number: int, region: int, client: int) -> int:
    if not 0 <= region < 100 or not 0 <= client < 1_000_000:
        raise ValueError(f"region must be in 0..99 and client in 0..999999 (got {region}, {client})")
    return number * 100_000_000 + region * 1_000_000 + client


@dataclass(eq=False)
class Ticket:
    """One query from the moment it is queued until its answer."""

    id: int
    request: Request
    nodes: frozenset[str] | None  # None: any one node; else a slot on each of these
    enqueued: float = field(default_factory=time.perf_counter)
    sent: float | None = None
    targets: dict[str, Downstream] = field(default_factory=dict)  # node (or any-member) -> link
    granted: list[str] = field(default_factory=list)  # nodes whose slot it holds
    answers: dict[str, Answer] = field(default_factory=dict)
    started: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    done: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())

    @property
    def state(self) -> str:
        if self.done.done():
            return "done"
        if self.started.done():
            return "running"
        return "queued" if self.sent is None else "sent"

    @property
    def wait_seconds(self) -> float:
        return (self.sent or time.perf_counter()) - self.enqueued


QUEUE_PER_SLOT = 8  # the default bound of the queue: this many waiting queries per slot of the region
DRAIN_CONFIRM_S = 2.0  # how long draining (or undraining) a node waits for its status to say so


class RegionBalancer:
    def __init__(
        self,
        region: int = 1,
        max_queue: int = 0,
        token: str | None = None,
        journal: Journal | None = None,
        backend: str | None = None,
        free_slot_first: bool = False,
    ):
        self.region = region
        self.backend = backend  # when set, nodes of another kind are turned away
        self.max_queue = max_queue  # 0: QUEUE_PER_SLOT per slot of the connected nodes
        self.token = token
        self.journal = journal or Journal(None, "balancer", f"region-{region}")
        self.pool = Pool(free_slot_first=free_slot_first)
        self.queue: deque[Ticket] = deque()
        self.in_flight: dict[int, Ticket] = {}
        self.counters = {"admitted": 0, "rejected": 0, "completed": 0, "failed": 0, "cancelled": 0, "moved": 0}
        self.rejections: Counter[str] = Counter()  # reason -> queries refused for capacity
        self._numbers = itertools.count(1)
        self._wake = asyncio.Event()
        self._pump: asyncio.Task | None = None
        self._membership = asyncio.Event()
        self._background: set[asyncio.Task] = set()
        self.draining = False  # the region admits no new query
        self._leaving = False  # the gateway stops once its statements have finished: drained for good

    # ---- the client side ------------------------------------------------------------------------

    def submit(
        self,
        sql: str = "",
        params: dict[str, Any] | None = None,
        tag: str = "",
        client: int = 0,
        nodes: frozenset[str] | None = None,
        lease: bool = False,
        number: int | None = None,
    ) -> Ticket:
        """Queue one query (under the id `number` from `new_id`, else a new one); Overloaded when
        the queue is full, nothing is connected or one of `nodes` is not."""
        self.check_admission()
        missing = sorted(nodes - {info.name for info in self.pool.node_infos()}) if nodes is not None else []
        if missing:
            self.reject("node_lost")
            raise Overloaded("node_lost", f"node(s) {', '.join(missing)} are not connected")
        number = number if number is not None else self.new_id(client)
        request = Request(id=number, sql=sql, params=params or {}, tag=tag, lease=lease)
        ticket = Ticket(number, request, nodes)
        self.queue.append(ticket)
        self.counters["admitted"] += 1
        self.journal.queue(client, len(self.queue))
        self._kick()
        return ticket

    def check_open(self) -> None:
        """Overloaded (`draining`) while the region is drained: it admits no new query; those it
        admitted before go on."""
        if self.draining:
            self.reject("draining")
            raise Overloaded(
                "draining", f"region {self.region} is draining: it admits no new query (retry later or elsewhere)"
            )

    def check_admission(self) -> None:
        """Overloaded when a query submitted now would be turned away (nothing connected, or a full
        queue): the gateway asks before it books a statement, so a refused query is answered at
        once and never listed."""
        if not self.pool.members:
            self.reject("no_nodes")
            raise Overloaded("no_nodes", f"region {self.region} has no connected node")
        bound = self.queue_bound
        if len(self.queue) >= bound:
            self.reject("queue_full")
            raise Overloaded("queue_full", f"the region's queue is full ({bound} queries)")

    @property
    def queue_bound(self) -> int:
        """How many queries may wait: `max_queue`, or by default `QUEUE_PER_SLOT` per slot of the
        connected nodes, so that a query admitted waits for a few rounds of the region's slots, not
        minutes, and load past the region's capacity is refused at once (503 with Retry-After)."""
        return self.max_queue or QUEUE_PER_SLOT * max(1, sum(info.slots for info in self.pool.node_infos()))

    def reject(self, reason: str) -> None:
        """Count a query refused for capacity: the one count of rejections, which /v1/cluster,
        `cxg status` and /metrics all show."""
        self.counters["rejected"] += 1
        self.rejections[reason] += 1

    @property
    def queue_length(self) -> int:
        return len(self.queue)

    def new_id(self, client: int = 0) -> int:
        """The next query id: global·10^8 + region·10^6 + client."""
        return query_id(next(self._numbers), self.region, client)

    async def answer(self, ticket: Ticket) -> Answer:
        """Wait for the query's answer (a non-lease query); DispatchFailed if it did not succeed."""
        return await asyncio.shield(ticket.done)

    async def release(self, ticket: Ticket) -> None:
        """End a lease: the slots it holds are freed on every node."""
        for node, member in ticket.targets.items():
            await member.send(Release(id=ticket.id))
            log.debug("released %s on %s", ticket.id, node)
        with contextlib.suppress(DispatchFailed, TimeoutError):
            await asyncio.wait_for(asyncio.shield(ticket.done), 30)

    async def cancel(self, ticket: Ticket) -> None:
        """Take the query out of the queue, or stop it on every node it was sent to."""
        if ticket.done.done():
            return
        if ticket in self.queue:
            self.queue.remove(ticket)
            self.journal.queue(client_of(ticket.id), len(self.queue))
        else:
            for member in set(ticket.targets.values()):
                await member.send(Cancel(id=ticket.id))
        self.in_flight.pop(ticket.id, None)
        self._finish(ticket, DispatchFailed("cancelled", "query cancelled"))

    def queued(self) -> list[Ticket]:
        """The queue, head first."""
        return list(self.queue)

    # ---- draining -------------------------------------------------------------------------------

    async def drain(self, on: bool = True, node: str | None = None) -> None:
        """Take the region (or `node`) out of rotation (`on`), or back into it: a node that is
        connected is told, and its status saying so awaited (`DRAIN_CONFIRM_S` at most). KeyError
        for a node that is neither connected nor drained. A region that is leaving stays drained."""
        if node is None:
            self.draining = on or self._leaving
            return
        if node not in self.pool.drained and all(info.name != node for info in self.pool.node_infos()):
            raise KeyError(node)
        if on:
            self.pool.drained.add(node)
        else:
            self.pool.drained.discard(node)
        member = self.pool.owner(node)
        if member is not None:
            await member.send(Drain(node=node, on=on))
            await settled(lambda: self.pool.node_states()[node].draining == on, DRAIN_CONFIRM_S)
        self._kick()

    def leave(self) -> None:
        """Drain the region for good: its gateway stops once what it admitted has finished."""
        self._leaving = self.draining = True

    def draining_nodes(self) -> list[str]:
        """The nodes that take no new query: drained here, or draining themselves (stopping)."""
        return sorted(self.pool.drained | {name for name, s in self.pool.node_states().items() if s.draining})

    async def _tell_drained(self, member: Downstream) -> None:
        """Tell a member which of its nodes are drained (a node that comes back stays so)."""
        for info in member.nodes:
            if info.name in self.pool.drained:
                await member.send(Drain(node=info.name))

    def hand_over(self, ticket: Ticket, region: str) -> None:
        """Take a queued query out of the queue: it runs in `region`; its `started` raises HandedOver."""
        self.queue.remove(ticket)
        self.journal.queue(client_of(ticket.id), len(self.queue))
        self._finish(ticket, HandedOver(region))

    # ---- dispatching ----------------------------------------------------------------------------

    def _spawn(self, work) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _kick(self) -> None:
        self._wake.set()
        if self._pump is None or self._pump.done():
            self._pump = asyncio.create_task(self._dispatcher())

    async def _dispatcher(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._dispatch()
            except Exception:  # the queue must keep moving whatever one send did
                log.exception("dispatch failed")

    async def _dispatch(self) -> None:
        while self.queue:
            ticket = self.queue[0]
            if ticket.nodes is None:
                member = self.pool.next_ready()
                if member is None:
                    return  # all refuse: wait for a status
                targets = {member.name: member}
            else:
                owners = {node: self.pool.owner(node) for node in sorted(ticket.nodes)}
                lost = [node for node, owner in owners.items() if owner is None]
                if lost:
                    self.queue.popleft()
                    self._finish(ticket, DispatchFailed("node_lost", f"node(s) {', '.join(lost)} went away"))
                    continue
                states = self.pool.node_states()
                drained = [node for node in owners if states[node].draining]
                if drained:
                    self.queue.popleft()
                    message = f"node(s) {', '.join(drained)} are draining: they take no new query"
                    self._finish(ticket, DispatchFailed("node_draining", message))
                    continue
                if not all(owner.node_ready(node) for node, owner in owners.items()):
                    return  # FIFO: the head waits for all its nodes
                targets = owners
            self.queue.popleft()
            self.journal.queue(client_of(ticket.id), len(self.queue))
            ticket.sent = time.perf_counter()
            ticket.targets = targets
            self.in_flight[ticket.id] = ticket
            pinned = ticket.nodes is not None
            for node, member in targets.items():
                request = ticket.request
                if pinned:
                    request = Request(**{**vars(request), "node": node, "payload": b""})
                if not await member.send(request):
                    log.warning("could not send %s to %s", ticket.id, member.name)

    # ---- packets from below ---------------------------------------------------------------------

    async def _from_downstream(self, member: Downstream, packet: Packet) -> None:
        if isinstance(packet, Status):
            member.status = packet
            if member.ready or any(s.ready for s in packet.nodes.values()):
                self._kick()
        elif isinstance(packet, Hello):
            member.hello = packet
            self._membership.set()
            await self._tell_drained(member)
            self._kick()
        elif isinstance(packet, Started):
            ticket = self.in_flight.get(packet.id)
            if ticket is not None and packet.node not in ticket.granted:
                ticket.granted.append(packet.node)
                if len(ticket.granted) == len(ticket.targets) and not ticket.started.done():
                    ticket.started.set_result(list(ticket.granted))
        elif isinstance(packet, Answer):
            self._answered(packet)

    def _answered(self, answer: Answer) -> None:
        ticket = self.in_flight.get(answer.id)
        if ticket is None:
            return  # cancelled meanwhile
        if not answer.ok and answer.code == "busy" and ticket.nodes is None:
            del self.in_flight[ticket.id]  # a stale "ready": send it again, first
            ticket.sent, ticket.targets = None, {}
            self.queue.appendleft(ticket)
            self._kick()
            return
        key = answer.node if ticket.nodes is not None else next(iter(ticket.targets))
        ticket.answers[key] = answer
        if not answer.ok:
            del self.in_flight[ticket.id]
            for node, member in ticket.targets.items():
                if node not in ticket.answers:
                    self._spawn(member.send(Cancel(id=ticket.id)))
            self._finish(ticket, DispatchFailed(answer.code or "execution_error", answer.message))
        elif len(ticket.answers) == len(ticket.targets):
            del self.in_flight[ticket.id]
            self._finish(ticket, answer)

    def _finish(self, ticket: Ticket, outcome: Answer | DispatchFailed) -> None:
        if ticket.done.done():
            return
        ok = isinstance(outcome, Answer)
        if ok:
            ticket.done.set_result(outcome)
            self.counters["completed"] += 1
        else:
            ticket.done.set_exception(outcome)
            ticket.done.exception()  # retrieved: nobody may be waiting any more
            self.counters[outcome.code if outcome.code in ("cancelled", "moved") else "failed"] += 1
        if not ticket.started.done():
            ticket.started.set_exception(outcome if not ok else DispatchFailed("execution_error", "answered unstarted"))
            ticket.started.exception()
        seconds = time.perf_counter() - ticket.sent if ticket.sent else 0.0
        self.journal.query(
            ticket.id,
            ticket.request.tag,
            seconds,
            len(outcome.payload) if ok else 0,
            len(self.queue),
            ",".join(ticket.granted),
            ok,
            ticket.wait_seconds,
        )

    # ---- links ----------------------------------------------------------------------------------

    async def _serve(self, link: Link, hello: Hello) -> None:
        strangers = [n.name for n in hello.nodes if self.backend and n.backend != self.backend]
        if strangers:
            log.error(
                "region %s runs %s nodes: turned away %s %s (%s)",
                self.region,
                self.backend,
                hello.role,
                hello.name,
                ", ".join(f"{n.name} is {n.backend}" for n in hello.nodes if n.name in strangers),
            )
            await link.close()
            return
        await serve_member(self.pool, link, hello, self._from_downstream, self._joined, self._left)

    async def _joined(self, member: Downstream) -> None:
        self._membership.set()
        hello = member.hello
        log.info("region %s: %s %s joined (%d node(s))", self.region, hello.role, hello.name, len(hello.nodes))
        await self._tell_drained(member)

    async def _left(self, member: Downstream) -> None:
        """Queries sent to a member that went away: requeued when nothing had started them and
        any node may answer, failed otherwise."""
        self._membership.set()
        log.warning("region %s: %s %s left", self.region, member.hello.role, member.name)
        for ticket in [t for t in self.in_flight.values() if member in t.targets.values()]:
            del self.in_flight[ticket.id]
            if ticket.nodes is None and not ticket.started.done():
                ticket.sent, ticket.targets = None, {}
                self.queue.appendleft(ticket)
            else:
                for other in set(ticket.targets.values()) - {member}:
                    self._spawn(other.send(Cancel(id=ticket.id)))
                self._finish(ticket, DispatchFailed("node_lost", f"{member.hello.role} {member.name} went away"))
        self._kick()

    async def connect(self, request: web.Request) -> web.StreamResponse:
        return await accept(request, self.token, self._serve)

    async def membership_changed(self) -> None:
        """Wait until a node or router joins, leaves or announces new tables."""
        self._membership.clear()
        await self._membership.wait()

    def nodes(self) -> list[NodeInfo]:
        return self.pool.node_infos()

    def settled(self) -> bool:
        """Whether every member has told its state since it joined (a region that starts waits for this)."""
        return all(m.current for m in self.pool.members)

    def close(self) -> None:
        self.journal.close()

    def snapshot(self) -> dict[str, Any]:
        """The region as `cxg status` shows it."""
        states = self.pool.node_states()
        return {
            "region": self.region,
            "draining": self.draining,
            "queue": len(self.queue),
            "queue_bound": self.queue_bound,
            "in_flight": len(self.in_flight),
            "ready": self.pool.ready,
            "counters": dict(self.counters),
            "rejections": dict(self.rejections),
            "members": [
                {
                    "name": m.name,
                    "role": m.hello.role,
                    "ready": m.ready,
                    "nodes": [
                        {**vars(info), "tables": len(info.tables), **vars(states[info.name])} for info in m.nodes
                    ],
                }
                for m in self.pool.members
            ],
        }
