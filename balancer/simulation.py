"""Simulation mode for nodes (seed 004 §4.1): a query sleeps for the time configured for its type
and answers random rows of the configured count, so capacity can be planned and the published
experiments reproduced on one machine. `time_scale` is real seconds per simulated second
(0.001: a simulated minute lasts 60 ms).

The built-in query types are the 14 read-only TPC-H queries with the mean MySQL times of seed
004 Table 5.5 (5, 10 and 15 GB) and the row counts of their TPC-H answers; `SimulationConfig`, the
configuration's `[simulation]` section, replaces them.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

import pyarrow as pa

from balancer.packets import Answer, Request, arrow_payload
from storage import ConfigError

# seed 004, Table 5.5: mean execution time of TPC-H queries 1..14 in MySQL, seconds
TABLE_5_5: dict[int, list[float]] = {
    5: [132.4, 1.2, 13.2, 7.2, 9.3, 16.1, 8.7, 23.6, 47.4, 16.2, 1.6, 22.7, 28.3, 18.3],
    10: [256.8, 2.1, 25, 14.3, 17.3, 31.8, 16.8, 47.8, 89.5, 32.6, 3.3, 44.3, 55, 36.3],
    15: [385.6, 3.1, 38.3, 21.7, 27.5, 47.7, 24.4, 72.7, 136, 64.6, 5, 66.5, 85.7, 54.8],
}
# seed 004, Table 5.6: V_σ, GB of relations TPC-H queries 1..14 process, for 5, 10 and 15 GB databases
TABLE_5_6: dict[int, list[float]] = {
    5: [3.21, 0.65, 4.05, 3.95, 4.06, 3.21, 4.06, 4.16, 4.59, 4.05, 1.61, 3.95, 0.85, 3.31],
    10: [6.46, 1.30, 8.16, 7.95, 8.18, 6.46, 8.18, 8.38, 9.25, 8.16, 3.23, 7.95, 1.70, 6.67],
    15: [9.74, 1.95, 12.31, 11.98, 12.33, 9.74, 12.33, 12.64, 13.94, 12.31, 4.87, 11.98, 2.56, 10.05],
}
# rows in the answers of TPC-H queries 1..14 (SF 1 reference answers)
ANSWER_ROWS = [4, 100, 10, 5, 5, 1, 4, 2, 175, 20, 1048, 2, 42, 1]


@dataclass(frozen=True)
class QueryType:
    seconds: float  # simulated execution time
    rows: int  # rows of the random answer
    volume: float = 1.0  # V_σ, GB of relations it processes (what balancing between regions weighs)


def table_5_5(size_gb: int = 5) -> dict[str, QueryType]:
    """Query types q1..q14 with the Table 5.5 times and Table 5.6 volumes for a 5, 10 or 15 GB
    database."""
    if size_gb not in TABLE_5_5:
        raise ValueError(f"Table 5.5 has times for 5, 10 and 15 GB, not {size_gb}")
    volumes = TABLE_5_6[size_gb]
    return {f"q{i + 1}": QueryType(t, ANSWER_ROWS[i], volumes[i]) for i, t in enumerate(TABLE_5_5[size_gb])}


@dataclass
class SimulationConfig:
    """The query types simulated nodes play (seed 004 §4.1), and how fast their time runs.

    A statement's tag names its query type; a type's volume is its V_σ, what balancing between regions weighs."""

    time_scale: float = field(default=0.001, metadata={"doc": "real seconds per simulated second"})
    size_gb: int = field(
        default=5, metadata={"doc": "which column of seed 004 Table 5.5 gives the 14 query times: 5, 10 or 15"}
    )
    queries: dict[str, dict[str, float]] = field(
        default_factory=dict,
        metadata={
            "doc": "query types by tag instead of Table 5.5: { q1 = { seconds = 12.5, rows = 4, volume = 3.2 } }"
        },
    )

    def query_types(self) -> dict[str, QueryType]:
        if not self.queries:
            return table_5_5(self.size_gb)
        try:
            return {
                tag: QueryType(float(q["seconds"]), int(q.get("rows", 1)), float(q.get("volume", 1.0)))
                for tag, q in self.queries.items()
            }
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"[simulation.queries] needs seconds (and rows, volume) per query type: {e}") from None


def random_answer(rows: int, seed: int) -> pa.Table:
    """`rows` random rows (key, value, label), the same for the same seed."""
    rng = random.Random(seed)
    return pa.table(
        {
            "key": pa.array([rng.randrange(1 << 31) for _ in range(rows)], pa.int64()),
            "value": pa.array([rng.random() * 1e6 for _ in range(rows)], pa.float64()),
            "label": pa.array([f"{rng.getrandbits(40):010x}" for _ in range(rows)], pa.string()),
        }
    )


class SimulationBackend:
    name = "simulation"

    def __init__(self, queries: dict[str, QueryType] | None = None, time_scale: float = 1.0):
        if time_scale < 0:
            raise ValueError("time_scale must be >= 0")
        self.queries = queries if queries is not None else table_5_5()
        self.time_scale = time_scale
        # pyarrow's first array imports pandas (0.4 s): done now, not on the first query, where it
        # would stall the node's event loop past its heartbeat and drop its link to the balancer
        random_answer(1, 0)

    def info(self) -> dict[str, int]:
        return {}

    async def execute(self, request: Request) -> Answer:
        kind = self.queries.get(request.tag)
        if kind is None:
            known = ", ".join(sorted(self.queries)) or "none"
            return Answer(
                id=request.id,
                node="",
                ok=False,
                code="unknown_query_type",
                message=f"simulation has no query type {request.tag!r} (known: {known}); set the statement's tag",
            )
        await asyncio.sleep(kind.seconds * self.time_scale)
        table = random_answer(kind.rows, request.id)
        return Answer(id=request.id, node="", rows=kind.rows, payload=arrow_payload(table))
