"""Balancing between regions (seed 004 §5.2): the weight W_r of a region's queue, and the methods
that move queries between regions by it, each a plain object with two calls a host makes:

- `rebalance(regions)` after every change of the queues (a query arrived or finished): moves
  queries between the regions' queues, one at a time, and returns the moves it made;
- `take(region, regions)` when a server of `region` has room: the query it runs next.

Methods: ``none``; ``centralized`` (an inter-regional balancer equalizes the weights by moving
one query from the tail of each queue above the mean weight to the lightest queue, every time a
region reports its weight after a query finished); ``decentralized`` (a region whose queue is
empty pulls the head query of the region with the largest weight, at once; no central node);
``idle-pull`` (ours: a server with room pulls, see `IdlePull`). The host is the discrete-event
simulation (`regions.cross_simulation`) or, live, the regions' gateways.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(slots=True, eq=False)
class Waiting:
    """A query as balancing sees it."""

    origin: int  # the region whose user sent it (its answer goes back there)
    volume: float  # V_σ: GB of relations it processes
    seconds: float  # its expected execution time
    submitted: float = 0.0  # when its user sent it
    moved: bool = False  # runs outside its origin


@dataclass(eq=False)
class RegionQueue:
    """A region's queue of waiting queries (the regional balancer's), with the running sums the
    weights need; `committed` is the expected work on its servers (running and buffered)."""

    number: int
    servers: int
    queue: deque[Waiting] = field(default_factory=deque)
    volume: float = 0.0  # Σ V_σ of the queue
    work: float = 0.0  # Σ expected seconds of the queue
    committed: float = 0.0

    def __len__(self) -> int:
        return len(self.queue)

    def push(self, query: Waiting) -> None:
        query.moved = query.origin != self.number
        self.queue.append(query)
        self._count(query, 1)

    def pop_head(self) -> Waiting:
        query = self.queue.popleft()
        self._count(query, -1)
        return query

    def pop_tail(self) -> Waiting:
        query = self.queue.pop()
        self._count(query, -1)
        return query

    def _count(self, query: Waiting, sign: int) -> None:
        self.volume += sign * query.volume
        self.work += sign * query.seconds
        if not self.queue:  # no drift of the float sums
            self.volume = self.work = 0.0

    def wait_per_server(self) -> float:
        """Expected seconds a query joining the queue waits: the work ahead of it, per server."""
        return (self.work + self.committed) / self.servers


@dataclass(frozen=True)
class Scale:
    """The normalizers of the weight: the largest database (GB) and region (servers)."""

    volume_max: float
    servers_max: int


PUBLISHED = Scale(15.0, 3)  # seed 004's experiment: 15 GB and 3 servers in its largest region
Weight = Callable[[RegionQueue, Scale], float]


def weight_as_printed(region: RegionQueue, scale: Scale) -> float:
    """W_r = Σ_i Σ_j (V_σ)_ij / (L_r · V_max) · n_max / n_r, as seed 004 prints it: the mean volume
    of a queued query, normalized, scaled by how few servers the region has; 0 for an empty queue."""
    if not region.queue:
        return 0.0
    return region.volume / (len(region.queue) * scale.volume_max) * scale.servers_max / region.servers


def weight_per_server(region: RegionQueue, scale: Scale) -> float:
    """W_r without the division by L_r: the queued volume per server, normalized."""
    return region.volume / scale.volume_max * scale.servers_max / region.servers


WEIGHTS: dict[str, Weight] = {"printed": weight_as_printed, "per-server": weight_per_server}


@dataclass(frozen=True)
class Move:
    query: Waiting
    source: int  # region numbers
    target: int


def move(source: RegionQueue, target: RegionQueue, tail: bool = False) -> Move:
    """Move the head (or tail) query of `source`'s queue to the end of `target`'s."""
    query = source.pop_tail() if tail else source.pop_head()
    target.push(query)
    return Move(query, source.number, target.number)


class NoBalancing:
    name = "none"
    immediate = True  # rebalanced at every change of a queue, not once per finished query

    def rebalance(self, regions: list[RegionQueue]) -> list[Move]:
        return []

    def take(self, region: RegionQueue, regions: list[RegionQueue]) -> Waiting | None:
        return region.pop_head() if region.queue else None


@dataclass
class Centralized(NoBalancing):
    """The inter-regional balancer: every time a weight changes it computes the mean weight M,
    takes one query from the tail of each queue with W_r > M, and hands it to the queue with the
    least weight (recomputed after each move)."""

    weight: Weight = weight_as_printed
    scale: Scale = PUBLISHED
    name: str = "centralized"
    immediate = False  # the regions report their weights when a query finishes

    def rebalance(self, regions: list[RegionQueue]) -> list[Move]:
        weights = {r.number: self.weight(r, self.scale) for r in regions}
        mean = sum(weights.values()) / len(regions)
        moves = []
        for source in [r for r in regions if weights[r.number] > mean and r.queue]:
            target = min(regions, key=lambda r: weights[r.number])
            if target is not source:
                moves.append(move(source, target, tail=True))
                weights[source.number] = self.weight(source, self.scale)
                weights[target.number] = self.weight(target, self.scale)
        return moves


@dataclass
class Decentralized(NoBalancing):
    """No central node: a region whose queue is empty asks the regions with queries queued for
    their weights and pulls the head query of the heaviest."""

    weight: Weight = weight_as_printed
    scale: Scale = PUBLISHED
    name: str = "decentralized"

    def rebalance(self, regions: list[RegionQueue]) -> list[Move]:
        moves = []
        for puller in regions:
            if puller.queue:
                continue
            donors = [r for r in regions if r is not puller and r.queue]
            if donors:
                moves.append(move(max(donors, key=lambda r: self.weight(r, self.scale)), puller))
        return moves


@dataclass
class IdlePull(NoBalancing):
    """Ours: join-the-idle-queue turned round, no central node. A server with room runs its own
    region's head query; with its own queue empty it pulls the head query of the region with the
    largest weight among those whose queries wait longer per server than `round_trip` (the WAN
    delay both ways: a query is moved only where that pays). Unlike the decentralized method it
    pulls when a server has room, not when its queue is empty, so no pulled query waits in a
    queue behind busy servers while its own region's servers could have run it."""

    weight: Weight = weight_as_printed
    scale: Scale = PUBLISHED
    round_trip: float = 0.0
    name: str = "idle-pull"

    def take(self, region: RegionQueue, regions: list[RegionQueue]) -> Waiting | None:
        if region.queue:
            return region.pop_head()
        donors = [r for r in regions if r is not region and r.queue and r.wait_per_server() > self.round_trip]
        if not donors:
            return None
        query = max(donors, key=lambda r: self.weight(r, self.scale)).pop_head()
        query.moved = region.number != query.origin
        return query


METHODS = ("none", "centralized", "decentralized", "idle-pull")


def method(name: str, weight: str = "printed", scale: Scale = PUBLISHED, round_trip: float = 0.0):
    """A balancing method by name (`METHODS`), with the reading of the weight (`WEIGHTS`)."""
    if weight not in WEIGHTS:
        raise ValueError(f"weight must be one of {', '.join(WEIGHTS)}, not {weight!r}")
    if name == "none":
        return NoBalancing()
    if name == "centralized":
        return Centralized(WEIGHTS[weight], scale)
    if name == "decentralized":
        return Decentralized(WEIGHTS[weight], scale)
    if name == "idle-pull":
        return IdlePull(WEIGHTS[weight], scale, round_trip)
    raise ValueError(f"balancing method must be one of {', '.join(METHODS)}, not {name!r}")
