"""The dissertation's PerformSys experiments (seed 004 §4.2) on simulation-mode nodes.

Each run starts a region of processes on loopback (gateway with the balancer, routers, nodes of
8 slots sleeping for the Table 5.5 time of each TPC-H query), sends 1000 queries drawn
uniformly from the 14 read-only TPC-H queries from N simulated users (closed model), and
measures T, M and σ with the first and last 100 answers excluded. `time_scale` real seconds
stand for one simulated second; figures are reported in simulated minutes.

Table 4.1: N = 50 users, 1..7 nodes. Table 4.2: N = 200 users, 1..6 routers of 3 nodes each.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from balancer.simulation import table_5_5
from loadtests import Run, Scenario, Simulator, Summary, Target, summarize
from loadtests.measures import counted
from loadtests.scenario import Query
from regions import LocalRegion, load_config

# seed 004 Table 4.1: nodes -> (M, T, σ) in minutes
TABLE_4_1 = {
    1: (6.0400, 98.72, 0.9151),
    2: (3.0202, 48.85, 0.4097),
    3: (2.0205, 33.63, 0.2460),
    4: (1.5206, 25.18, 0.2220),
    5: (1.1809, 19.92, 0.1577),
    6: (1.0123, 17.15, 0.1535),
    7: (0.9506, 15.97, 0.1337),
}
# seed 004 Table 4.2: routers (3 nodes each) -> (M, T, σ) in minutes
TABLE_4_2 = {
    1: (7.29, 42.8, 2.48),
    2: (3.69, 22.68, 1.74),
    3: (2.49, 16.07, 1.57),
    4: (1.86, 12.8, 1.46),
    5: (1.7, 10.3, 2.54),
    6: (1.53, 9.57, 3.25),
}


@dataclass(frozen=True)
class Setup:
    nodes: int
    routers: int = 0
    slots: int = 8
    users: int = 50
    queries: int = 1000
    exclude: int = 100
    time_scale: float = 0.05
    dispatch: str = "round-robin"
    size_gb: int = 5
    seed: int = 1


@dataclass
class Outcome:
    setup: Setup
    summary: Summary
    run: Run

    def minutes(self, seconds: float) -> float:
        return seconds / self.setup.time_scale / 60

    @property
    def T(self) -> float:
        return self.minutes(self.summary.T)

    @property
    def M(self) -> float:
        return self.minutes(self.summary.overall.mean)

    @property
    def sigma(self) -> float:
        return self.minutes(self.summary.overall.sigma)

    def nominal_overhead_ms(self) -> float:
        """Mean real milliseconds a counted query spent beyond its simulated time, were it alone
        on a free slot (queueing included)."""
        kinds = table_5_5(self.setup.size_gb)
        kept = [r for r in counted(self.run.records, self.setup.exclude)[0] if r.ok and r.response is not None]
        extra = [r.response - kinds[r.tag].seconds * self.setup.time_scale for r in kept]
        return 1000 * sum(extra) / len(extra) if extra else 0.0


def queries(size_gb: int = 5) -> list[Query]:
    """The 14 query types; simulation nodes pick the time by the tag, the SQL only travels."""
    return [Query(tag, f"SELECT '{tag}' AS query") for tag in table_5_5(size_gb)]


def run_setup(setup: Setup, on_record=None) -> Outcome:
    """Start the region of `setup`, run the load, stop the region."""
    sets = [
        'region.backend="simulation"',
        f"region.nodes={setup.nodes}",
        f"region.routers={setup.routers}",
        f"region.slots={setup.slots}",
        f'region.dispatch="{setup.dispatch}"',
        f"simulation.time_scale={setup.time_scale}",
        f"simulation.size_gb={setup.size_gb}",
        "gateway.port=0",
        "region.first_port=0",
        f"gateway.max_queue={max(10_000, setup.users * 2)}",
    ]
    config = load_config(None, sets)
    config_args = [x for s in sets for x in ("--set", s)]
    scenario = Scenario.uniform(queries(setup.size_gb), setup.queries, setup.seed)
    with LocalRegion(config, config_args) as region:
        simulator = Simulator([Target(1, region.url)], setup.users, scenario, on_record=on_record)
        run = asyncio.run(simulator.run())
    return Outcome(setup, summarize(run.records, setup.exclude), run)
