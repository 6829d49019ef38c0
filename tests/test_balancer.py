"""The three PerformSys roles over real WebSocket links: the node's K slots and one-query
buffer, the router's round-robin over ready nodes, the balancer's FIFO queue that stops when
all refuse and resumes on the first ready, multi-node leases, cancellation and lost nodes."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from balancer import Answer, DispatchFailed, NodeInfo, NodeServer, Request, query_id
from balancer.downstream import Pool
from balancer.link import CONNECT_PATH, accept
from balancer.packets import Hello, Status, decode, encode
from balancer.serving import serve_member
from gateway import free_port
from regions import EmbeddedRegion, load_config
from tests.balancing import Gate, on_loop, until
from tests.waiting import eventually_async


def _config(**options: str):
    sets = ['region.backend="simulation"', "gateway.port=0", *(f"{k}={v}" for k, v in options.items())]
    return load_config(None, sets)


def test_packets_round_trip() -> None:
    packet = Answer(id=7, node="n", ok=False, code="busy", message="full", payload=b"\x00\x01")
    assert decode(encode(packet)) == packet
    status = Status(ready=True, received=3, nodes={})
    assert decode(encode(status)) == status


def test_query_id_is_global_region_client() -> None:
    assert query_id(12, 3, 45) == 12 * 10**8 + 3 * 10**6 + 45
    with pytest.raises(ValueError):
        query_id(1, 100, 0)
    with pytest.raises(ValueError):
        query_id(1, 1, 1_000_000)


def test_node_runs_k_queries_buffers_one_and_refuses_the_rest() -> None:
    async def scenario() -> None:
        packets: list = []
        linked = asyncio.Event()
        links: list = []

        async def serve(link, hello) -> None:
            assert hello.nodes == [NodeInfo("n", "simulation", 2, "", {})]
            links.append(link)
            linked.set()
            async for packet in link.packets():
                packets.append(packet)

        async def connect(request: web.Request) -> web.StreamResponse:
            return await accept(request, None, serve)

        app = web.Application()
        app.router.add_get(CONNECT_PATH, connect)
        runner = web.AppRunner(app)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        gate = Gate()
        node = NodeServer("n", gate, slots=2)
        stop = asyncio.Event()
        task = asyncio.create_task(node.run(f"http://127.0.0.1:{port}", stop=stop))
        await asyncio.wait_for(linked.wait(), 10)
        for i in range(1, 5):  # more than K + 1 without waiting for a status
            await links[0].send(Request(id=i, tag="t"))

        await eventually_async(
            lambda: any(isinstance(p, Answer) for p in packets) and len(gate.running) == 2,
            10,
            "two queries running and one refused",
        )
        assert node.running == 2 and gate.running == {1, 2}
        assert node.buffer is not None and node.buffer.id == 3
        refused = [p for p in packets if isinstance(p, Answer)]
        assert [(a.id, a.code) for a in refused] == [(4, "busy")]
        last = [p for p in packets if isinstance(p, Status)][-1]
        assert last.ready is False and last.received == 4

        packets.clear()
        gate.finish(1)

        def promoted() -> bool:  # query 3 runs, query 1's answer went upstream, then a status saying ready
            statuses = [p for p in packets if isinstance(p, Status)]
            answered = any(isinstance(p, Answer) for p in packets)
            return answered and gate.running == {2, 3} and bool(statuses) and statuses[-1].ready

        await eventually_async(promoted, 10, "query 3 promoted, query 1 answered, a ready status")
        kinds = [(type(p).__name__, getattr(p, "id", None)) for p in packets]
        # the buffered query takes the freed slot before the answer goes upstream
        assert kinds.index(("Started", 3)) < kinds.index(("Answer", 1))
        assert node.buffer is None and gate.running == {2, 3}
        assert [p for p in packets if isinstance(p, Status)][-1].ready is True
        assert gate.max_running == 2
        gate.finish_all()
        stop.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await runner.cleanup()

    asyncio.run(scenario())


def test_balancer_stops_when_all_refuse_and_resumes_on_the_first_ready() -> None:
    gates = [Gate(), Gate()]
    nodes = [NodeServer(f"n{i}", gate, slots=1) for i, gate in enumerate(gates)]
    with EmbeddedRegion(_config(), nodes) as region:
        balancer = region.gateway.balancer
        tickets = on_loop(region, lambda: [balancer.submit(tag="t", client=c) for c in range(6)])
        until(region, lambda: all(n.buffer is not None for n in nodes), what="both buffers full")
        # K=1 running and one buffered per node; the other two wait in the balancer's FIFO queue
        assert [len(g.running) for g in gates] == [1, 1]
        assert on_loop(region, lambda: [t.id for t in balancer.queue]) == [tickets[4].id, tickets[5].id]
        assert on_loop(region, lambda: balancer.pool.ready) is False
        first = next(iter(gates[0].running))
        gates[0].finish(first)
        until(region, lambda: len(balancer.queue) == 1, what="one query dispatched")
        assert on_loop(region, lambda: nodes[0].buffer.id) == tickets[4].id  # to the node that freed a slot
        assert on_loop(region, lambda: nodes[1].buffer.id) != tickets[4].id
        answer = region.call(balancer.answer(tickets[[t.id for t in tickets].index(first)]))
        assert answer.ok
        for _ in range(8):
            for gate in gates:
                gate.finish_all()
            if on_loop(region, lambda: all(t.done.done() for t in tickets)):
                break
            until(region, lambda: any(g.running for g in gates) or all(t.done.done() for t in tickets))
        until(region, lambda: all(t.done.done() for t in tickets), what="all answers")
        assert max(g.max_running for g in gates) == 1
        assert sorted(gates[0].seen + gates[1].seen) == sorted(t.id for t in tickets)


def test_router_looks_like_one_node_and_hides_its_nodes() -> None:
    gates = [Gate() for _ in range(3)]
    nodes = [NodeServer(f"n{i}", gate, slots=1) for i, gate in enumerate(gates)]
    with EmbeddedRegion(_config(), nodes, {"r0": ["n0", "n1", "n2"]}) as region:
        balancer = region.gateway.balancer
        members = on_loop(region, lambda: [(m.name, m.hello.role, len(m.nodes)) for m in balancer.pool.members])
        assert members == [("r0", "router", 3)]
        tickets = on_loop(region, lambda: [balancer.submit(tag="t") for _ in range(3)])
        until(region, lambda: all(len(g.running) == 1 for g in gates), what="one query per node")
        assert [g.seen for g in gates] == [[tickets[0].id], [tickets[1].id], [tickets[2].id]]  # round-robin
        more = on_loop(region, lambda: [balancer.submit(tag="t") for _ in range(4)])
        until(region, lambda: all(n.buffer is not None for n in nodes), what="buffers full")
        assert on_loop(region, lambda: balancer.pool.members[0].ready) is False  # all three refuse
        assert on_loop(region, lambda: len(balancer.queue)) == 1
        gates[1].finish_all()
        until(region, lambda: len(balancer.queue) == 0, what="router ready again")
        assert on_loop(region, lambda: nodes[1].buffer.id) == more[3].id
        for _ in range(10):
            for gate in gates:
                gate.finish_all()
            if on_loop(region, lambda: all(t.done.done() for t in tickets + more)):
                break
            until(region, lambda: any(g.running for g in gates) or all(t.done.done() for t in tickets + more))
        assert all(g.max_running == 1 for g in gates)


def test_a_partitioned_query_takes_a_slot_on_every_node_it_reads() -> None:
    gates = [Gate(), Gate()]
    nodes = [NodeServer(f"n{i}", gate, slots=1) for i, gate in enumerate(gates)]
    with EmbeddedRegion(_config(), nodes) as region:
        balancer = region.gateway.balancer
        single = on_loop(region, lambda: balancer.submit(tag="t"))
        until(region, lambda: single.started.done())
        lease = on_loop(region, lambda: balancer.submit(nodes=frozenset({"n0", "n1"}), lease=True))

        def holds(node: NodeServer) -> str:
            if any(r is not None and r.id == lease.id for r in node.slots):
                return "slot"
            return "buffer" if node.buffer is not None and node.buffer.id == lease.id else ""

        until(region, lambda: all(holds(n) for n in nodes), what="the lease on both nodes")
        assert sorted(on_loop(region, lambda: [holds(n) for n in nodes])) == ["buffer", "slot"]
        assert not lease.started.done()  # it starts only when it holds a slot on each node
        for gate in gates:
            gate.finish_all()
        assert sorted(region.call(lease.started)) == ["n0", "n1"]
        assert on_loop(region, lambda: [holds(n) for n in nodes]) == ["slot", "slot"]
        region.call(balancer.release(lease))
        until(region, lambda: all(n.running == 0 for n in nodes), what="slots released")
        assert lease.done.result().ok


def test_cancel_takes_a_query_out_of_the_queue_or_off_its_node() -> None:
    gate = Gate()
    node = NodeServer("n0", gate, slots=1)
    with EmbeddedRegion(_config(), [node]) as region:
        balancer = region.gateway.balancer
        running, buffered, queued = on_loop(region, lambda: [balancer.submit(tag="t") for _ in range(3)])
        until(region, lambda: node.buffer is not None and len(balancer.queue) == 1)
        region.call(balancer.cancel(queued))
        assert on_loop(region, lambda: len(balancer.queue)) == 0
        region.call(balancer.cancel(running))
        until(region, lambda: node.slots[0] is not None and node.slots[0].id == buffered.id, what="buffer promoted")
        with pytest.raises(DispatchFailed, match="cancelled"):
            region.call(balancer.answer(queued))
        assert on_loop(region, lambda: balancer.counters["cancelled"]) == 2
        gate.finish_all()
        assert region.call(balancer.answer(buffered)).ok


def test_queries_of_a_lost_node_go_to_another() -> None:
    gates = [Gate(), Gate()]
    nodes = [NodeServer(f"n{i}", gate, slots=1) for i, gate in enumerate(gates)]
    with EmbeddedRegion(_config(), nodes) as region:
        balancer = region.gateway.balancer
        tickets = on_loop(region, lambda: [balancer.submit(tag="t") for _ in range(4)])
        until(region, lambda: nodes[0].buffer is not None and nodes[1].buffer is not None)
        lost = on_loop(region, lambda: nodes[0].buffer.id)
        region.call(nodes[0].link.close())  # node 0 goes away: its running query fails, its buffered one moves
        until(region, lambda: len(balancer.nodes()) == 1)
        for _ in range(6):
            gates[1].finish_all()
            if on_loop(region, lambda: all(t.done.done() for t in tickets)):
                break
            until(region, lambda: gates[1].running or all(t.done.done() for t in tickets))
        outcomes = {t.id: (t.done.exception() is None) for t in tickets}
        assert outcomes[lost] is True and lost in gates[1].seen
        assert sum(not ok for ok in outcomes.values()) == 1  # only the one running on node 0


class _Link:
    """A link whose peer sends `packets` and then, with `hang`, stays silent until cancelled."""

    def __init__(self, packets: list, hang: bool = False):
        self._packets, self._hang, self.peer = packets, hang, "peer"

    async def packets(self):
        for packet in self._packets:
            yield packet
        if self._hang:
            await asyncio.Event().wait()


def test_a_member_is_served_in_order_and_leaves_its_pool_unless_replaced() -> None:
    hello = Hello(name="n1", role="node", nodes=[NodeInfo("n1", "simulation", 1)])
    statuses = [Status(ready=i % 2 == 0, received=i) for i in range(3)]

    async def scenario() -> None:
        pool, seen, events = Pool(), [], []

        async def handle(member, packet) -> None:
            assert pool.get("n1") is member  # a member of the pool while it is served
            seen.append(packet)

        async def joined(member) -> None:
            events.append(("joined", member.name))

        async def left(member) -> None:
            events.append(("left", member.name))

        await serve_member(pool, _Link(statuses), hello, handle, joined, left)
        assert seen == statuses and events == [("joined", "n1"), ("left", "n1")] and pool.get("n1") is None

        # the old link of a node that reconnected ends after the new one joined: the new one stays
        old = asyncio.create_task(serve_member(pool, _Link([], hang=True), hello, handle, joined, left))
        await eventually_async(lambda: pool.get("n1") is not None, 10, "the old link joined")
        await serve_member(pool, _Link([]), hello, handle, joined, left)  # joins, replacing, then leaves
        newer = asyncio.create_task(serve_member(pool, _Link([], hang=True), hello, handle, joined, left))
        await eventually_async(lambda: pool.get("n1") is not None, 10, "the newer link joined")
        replacement, departures = pool.get("n1"), events.count(("left", "n1"))
        old.cancel()  # a cancelled link is cleaned up too
        await asyncio.gather(old, return_exceptions=True)
        assert pool.get("n1") is replacement and events.count(("left", "n1")) == departures + 1
        newer.cancel()
        await asyncio.gather(newer, return_exceptions=True)
        assert pool.get("n1") is None

    asyncio.run(scenario())
