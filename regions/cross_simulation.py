"""The cross-simulation of seed 004 §5.2: regions in different time zones, each with its servers,
users and database, and a method of balancing between them (`regions.balancing`), run as a
discrete-event simulation in model time.

The published setup (`Experiment`'s defaults): 3 regions; region r has n_r = r servers,
N_r = 30·n_r users and a 5·n_r GB database; users are active 16 h a day, each region 4 h after
the one before; a user sends a query, waits for its answer and at once sends the next (drawn
uniformly from the 14 read-only TPC-H queries, with the times of Table 5.5 and volumes of Table
5.6 for its region's database), and sends nothing while its region is passive. Within a region
the regional balancer keeps a queue and hands its head query to a server with room; a server
runs one query and holds one more. At a region's activation its users (N_r of them) send their
first queries. Three model days, 3 runs with different seeds.

Readings where the text leaves a choice (docs/regions.md says why): a moved query runs with the
times of its own region's database (every server holds copies of every database); the published
counts are of queries finished over the whole run, warm-up included; WAN delays (below 200 ms,
ignored in the published model) are `wan_delay` each way, added to a moved query's response
time.
"""

from __future__ import annotations

import heapq
import random
import statistics
from dataclasses import dataclass, field

from balancer import TABLE_5_5, TABLE_5_6
from regions.balancing import NoBalancing, RegionQueue, Scale, Waiting, method

HOUR = 3600.0
DAY = 24 * HOUR
FINISH, ACTIVATE, DEACTIVATE = 0, 1, 2


@dataclass(frozen=True)
class Experiment:
    regions: int = 3
    users_per_server: int = 30
    gb_per_server: int = 5
    active_hours: float = 16.0
    shift_hours: float = 4.0  # between neighbouring regions' activations
    days: int = 3
    warm_up_days: int = 2
    wan_delay: float = 0.0  # seconds each way between regions

    def servers(self, region: int) -> int:
        return region

    def database_gb(self, region: int) -> int:
        return self.gb_per_server * self.servers(region)

    def scale(self) -> Scale:
        return Scale(float(self.database_gb(self.regions)), self.servers(self.regions))


@dataclass
class Outcome:
    """One run: queries finished per origin region over the whole run, per hour and on the
    measured days, their mean response time on the measured days, queries run outside their
    region, and the servers' busy share."""

    sent: dict[int, int]  # queries the users of each region sent
    finished: dict[int, int]
    unfinished: int  # queued or on a server at the end
    hourly: dict[int, list[int]]
    measured: dict[int, int]
    response: dict[int, float]
    moved: int
    busy: float


@dataclass(slots=True, eq=False)
class _Server:
    index: int
    running: Waiting | None = None
    held: Waiting | None = None


@dataclass
class _Region:
    queue: RegionQueue
    users: int
    active: bool = False
    outstanding: int = 0  # its users' queries not yet answered, wherever they are
    servers: list[_Server] = field(default_factory=list)
    next_server: int = 0  # round robin


def simulate(experiment: Experiment, balancing: NoBalancing, seed: int) -> Outcome:
    """One run of `experiment` under a balancing method."""
    rng = random.Random(seed)
    numbers = range(1, experiment.regions + 1)
    regions = {
        r: _Region(
            RegionQueue(r, experiment.servers(r)),
            experiment.users_per_server * experiment.servers(r),
            servers=[_Server(i) for i in range(experiment.servers(r))],
        )
        for r in numbers
    }
    queues = [regions[r].queue for r in numbers]
    times = {r: TABLE_5_5[experiment.database_gb(r)] for r in numbers}
    volumes = {r: TABLE_5_6[experiment.database_gb(r)] for r in numbers}
    events: list[tuple[float, int, int, int, int]] = []  # (time, order, kind, region, server)
    order = 0

    def at(time: float, kind: int, region: int, server: int = 0) -> None:
        nonlocal order
        order += 1
        heapq.heappush(events, (time, order, kind, region, server))

    end = experiment.days * DAY
    for r in numbers:
        wakes = (r - 1) * experiment.shift_hours * HOUR
        for day in range(experiment.days):
            at(wakes + day * DAY, ACTIVATE, r)
            at(wakes + day * DAY + experiment.active_hours * HOUR, DEACTIVATE, r)

    sent = dict.fromkeys(numbers, 0)
    finished = dict.fromkeys(numbers, 0)
    hourly = {r: [0] * int(experiment.days * 24) for r in numbers}
    measured = dict.fromkeys(numbers, 0)
    responses: dict[int, list[float]] = {r: [] for r in numbers}
    busy = 0.0
    moved = 0
    measure_from = experiment.warm_up_days * DAY

    def send(origin: int, now: float) -> None:
        kind = rng.randrange(14)
        sent[origin] += 1
        regions[origin].outstanding += 1
        regions[origin].queue.push(Waiting(origin, volumes[origin][kind], times[origin][kind], now))

    def start(region: int, server: _Server, query: Waiting, now: float) -> None:
        nonlocal busy
        server.running = query
        busy += min(query.seconds, max(0.0, end - now))
        at(now + query.seconds, FINISH, region, server.index)

    def fill(region: int, now: float) -> int:
        """Servers with room take queries, round robin from the last one served; how many."""
        state = regions[region]
        count, first, taken = len(state.servers), state.next_server, 0
        for step in range(count):
            server = state.servers[(first + step) % count]
            while server.running is None or server.held is None:
                query = balancing.take(state.queue, queues)
                if query is None:
                    return taken
                taken += 1
                state.queue.committed += query.seconds
                if server.running is None:
                    start(region, server, query, now)
                else:
                    server.held = query
            state.next_server = (first + step + 1) % count
        return taken

    while events:
        now, _, kind, region, index = heapq.heappop(events)
        if now > end:
            break
        state = regions[region]
        if kind == FINISH:
            server = state.servers[index]
            query, server.running = server.running, None
            state.queue.committed -= query.seconds
            if not any(s.running or s.held for s in state.servers):
                state.queue.committed = 0.0  # no drift of the float sum
            origin = regions[query.origin]
            origin.outstanding -= 1
            finished[query.origin] += 1
            hourly[query.origin][min(int(now // HOUR), len(hourly[query.origin]) - 1)] += 1
            moved += query.moved
            delay = 2 * experiment.wan_delay if query.moved else 0.0
            if now >= measure_from:
                measured[query.origin] += 1
                responses[query.origin].append(now + delay - query.submitted)
            if server.held is not None:
                next_query, server.held = server.held, None
                start(region, server, next_query, now)
            if origin.active:
                send(query.origin, now + delay)
        elif kind == ACTIVATE:
            state.active = True
            for _ in range(state.users - state.outstanding):
                send(region, now)
        else:
            state.active = False
        again = True
        while again:  # for an immediate method, servers taking queries change the queues again
            balancing.rebalance(queues)
            again = sum(fill(r, now) for r in numbers) > 0 and balancing.immediate
    capacity = sum(experiment.servers(r) for r in numbers) * end
    unfinished = sum(
        len(s.queue) + sum((v.running is not None) + (v.held is not None) for v in s.servers) for s in regions.values()
    )
    return Outcome(
        sent,
        finished,
        unfinished,
        hourly,
        measured,
        {r: statistics.fmean(v) if v else 0.0 for r, v in responses.items()},
        moved,
        busy / capacity,
    )


def run_methods(
    experiment: Experiment, methods: list[str], seeds: list[int], weight: str = "printed"
) -> dict[str, list[Outcome]]:
    """Every method on every seed (the same seeds: the same users' choices where paths agree)."""
    round_trip = 2 * experiment.wan_delay
    return {
        name: [simulate(experiment, method(name, weight, experiment.scale(), round_trip), s) for s in seeds]
        for name in methods
    }
