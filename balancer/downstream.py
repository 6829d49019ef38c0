"""What a router or balancer knows about the nodes and routers below it: their links, their
last status, and round-robin choice among the ready ones."""

from __future__ import annotations

from dataclasses import dataclass, field

from balancer.link import Link
from balancer.packets import Hello, NodeInfo, NodeState, Packet, Status


@dataclass(eq=False)
class Downstream:
    """One connected node or router. Its status counts only once it has seen everything sent to
    it (`Status.received == sent`): until then it is treated as refusing, so two requests are
    never sent on one stale "ready"."""

    link: Link
    hello: Hello
    status: Status | None = None
    sent: int = 0

    @property
    def name(self) -> str:
        return self.hello.name

    @property
    def nodes(self) -> list[NodeInfo]:
        return self.hello.nodes

    @property
    def current(self) -> bool:
        return self.status is not None and self.status.received == self.sent

    @property
    def ready(self) -> bool:
        return self.current and self.status.ready

    def node_ready(self, node: str) -> bool:
        if not self.current:
            return False
        state = self.status.nodes.get(node)
        return state is not None and state.ready

    async def send(self, packet: Packet) -> bool:
        if packet.type == "request":
            self.sent += 1
        return await self.link.send(packet)


@dataclass
class Pool:
    """Downstreams in connection order, with the round-robin position k of the algorithms, and the
    nodes below drained by the operator (no new query goes to them)."""

    members: list[Downstream] = field(default_factory=list)
    k: int = -1
    free_slot_first: bool = False  # skip members whose slots are all busy while another has one free
    drained: set[str] = field(default_factory=set)

    def add(self, member: Downstream) -> None:
        self.remove(member.name)
        self.members.append(member)

    def remove(self, name: str) -> Downstream | None:
        for i, member in enumerate(self.members):
            if member.name == name:
                del self.members[i]
                if i <= self.k:
                    self.k -= 1
                return member
        return None

    def get(self, name: str) -> Downstream | None:
        return next((m for m in self.members if m.name == name), None)

    def next_ready(self) -> Downstream | None:
        """The next ready member after the last one chosen (k := k + 1, wrapping), or None when
        all refuse. With `free_slot_first`, a member with a free slot is preferred to one that
        would only buffer the query."""
        count = len(self.members)
        order = [(self.k + step) % count for step in range(1, count + 1)]
        for free_slot in (True, False) if self.free_slot_first else (False,):
            for i in order:
                if self._takes(self.members[i], free_slot):
                    self.k = i
                    return self.members[i]
        return None

    def _takes(self, member: Downstream, free_slot: bool) -> bool:
        """Whether `member` takes a query now on a node that is not drained (with `free_slot`: into
        a free slot, where it starts at once, not the buffer)."""
        return member.ready and any(
            state.ready and name not in self.drained and (not free_slot or state.running < state.slots)
            for name, state in member.status.nodes.items()
        )

    def owner(self, node: str) -> Downstream | None:
        """The member that is `node` or routes to it."""
        return next((m for m in self.members if any(n.name == node for n in m.nodes)), None)

    @property
    def ready(self) -> bool:
        return any(m.ready for m in self.members)

    def node_states(self) -> dict[str, NodeState]:
        """The last known state of every node below, refusing until its status is current."""
        states: dict[str, NodeState] = {}
        for member in self.members:
            reported = member.status.nodes if member.status else {}
            for info in member.nodes:
                state = reported.get(info.name, NodeState(ready=False, slots=info.slots))
                states[info.name] = NodeState(
                    ready=member.current and state.ready,
                    slots=state.slots,
                    running=state.running,
                    buffered=state.buffered,
                    draining=state.draining or info.name in self.drained,
                )
        return states

    def node_infos(self) -> list[NodeInfo]:
        return [info for member in self.members for info in member.nodes]
