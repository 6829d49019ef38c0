"""Load-test scenarios (seed 004 §4.1, the *client* program): timed steps applied to all users
(`work`, `sleep`, `stop`), a list of queries, and how each user picks the next one.

    mode = "random"        # random (uniform), sequential, or fromlist (run the list once)
    seed = 1
    total = 1000           # random/sequential: stop after this many queries
    queries = "tpch14"     # a built-in list (tpch14: TPC-H 1..14 as the dissertation; tpch22) ...

    [[query]]              # ... or your own, as SQL or a file next to the scenario
    tag = "top-customers"
    sql = "SELECT ..."

    [[step]]
    at = 0                 # seconds from the start
    action = "work"        # work: send queries; sleep: send none (running ones finish);
                           # stop: send none, end once every answer is in

`fromlist` needs no stop step: the run ends when the list is used up. `random` and
`sequential` need `total` or a `stop` step; without either a stop is added 60 s after the
last step.
"""

from __future__ import annotations

import random
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadtests.tpch_queries import query as tpch_query

ACTIONS = ("work", "sleep", "stop")
MODES = ("random", "sequential", "fromlist")
DEFAULT_STOP_AFTER = 60.0


class ScenarioError(ValueError):
    code = "invalid_scenario"


@dataclass(frozen=True)
class Query:
    tag: str
    sql: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    at: float
    action: str


def tpch_list(count: int) -> list[Query]:
    """TPC-H queries 1..count (14: the read-only set of the dissertation; 22: all)."""
    return [Query(f"q{n}", tpch_query(n)) for n in range(1, count + 1)]


BUILT_IN = {"tpch14": lambda: tpch_list(14), "tpch22": lambda: tpch_list(22)}


@dataclass
class Scenario:
    queries: list[Query]
    mode: str = "random"
    steps: list[Step] = field(default_factory=lambda: [Step(0.0, "work")])
    total: int | None = None
    seed: int = 1
    order: list[int] | None = None  # fromlist: indexes into `queries`, the list run once

    def __post_init__(self) -> None:
        if not self.queries:
            raise ScenarioError("a scenario needs at least one query")
        if self.mode not in MODES:
            raise ScenarioError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        for step in self.steps:
            if step.action not in ACTIONS:
                raise ScenarioError(f"step action must be one of {', '.join(ACTIONS)}, not {step.action!r}")
            if step.at < 0:
                raise ScenarioError("step times are seconds from the start, >= 0")
        self.steps = sorted(self.steps, key=lambda s: s.at)
        if self.total is not None and self.total < 1:
            raise ScenarioError("total must be at least 1")
        if self.mode == "fromlist" and self.order is None:
            self.order = list(range(len(self.queries)))
        if self.order is not None and any(not 0 <= i < len(self.queries) for i in self.order):
            raise ScenarioError(f"the query list refers to queries outside 1..{len(self.queries)}")
        if self.mode != "fromlist" and self.total is None and not any(s.action == "stop" for s in self.steps):
            self.steps.append(Step(self.steps[-1].at + DEFAULT_STOP_AFTER, "stop"))

    @property
    def expected(self) -> int | None:
        """How many queries the run sends, when that is known beforehand."""
        if self.mode == "fromlist":
            return len(self.order) if self.total is None else min(self.total, len(self.order))
        return self.total

    def action_at(self, elapsed: float) -> str:
        """The step in effect `elapsed` seconds after the start (work before the first step)."""
        action = "work"
        for step in self.steps:
            if step.at <= elapsed:
                action = step.action
        return action

    def picker(self) -> Picker:
        return Picker(self)

    @classmethod
    def uniform(cls, queries: list[Query], total: int, seed: int = 1) -> Scenario:
        """`total` queries drawn uniformly from `queries`, run once in that order (Table 4.1's set)."""
        rng = random.Random(seed)
        return cls(queries, "fromlist", order=[rng.randrange(len(queries)) for _ in range(total)], seed=seed)


class Picker:
    """Chooses the query for each (global number, user): random draws follow the global order, so
    the same seed gives the same sequence whatever the timing."""

    def __init__(self, scenario: Scenario):
        self.scenario = scenario
        self._rng = random.Random(scenario.seed)
        self._draws: list[int] = []
        self._next_of_user: dict[int, int] = {}

    def pick(self, number: int, user: int) -> int | None:
        """The index of query `number` (1-based, in sending order), None when the list is used up."""
        s = self.scenario
        if s.total is not None and number > s.total:
            return None
        if s.mode == "fromlist":
            return s.order[number - 1] if number <= len(s.order) else None
        if s.mode == "random":
            while len(self._draws) < number:
                self._draws.append(self._rng.randrange(len(s.queries)))
            return self._draws[number - 1]
        position = self._next_of_user.get(user, 0)
        self._next_of_user[user] = position + 1
        return position % len(s.queries)


def load_scenario(path: str | Path) -> Scenario:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ScenarioError(f"scenario file {path} not found") from None
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(f"scenario file {path}: {e}") from None
    return scenario_from(data, path.parent)


def scenario_from(data: dict[str, Any], base: Path = Path(".")) -> Scenario:
    known = {"mode", "seed", "total", "queries", "query", "step", "list"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ScenarioError(f"unknown scenario key(s): {', '.join(unknown)}")
    queries: list[Query] = []
    if "queries" in data:
        name = data["queries"]
        if name not in BUILT_IN:
            raise ScenarioError(f"queries = {name!r}: built-in lists are {', '.join(BUILT_IN)}")
        queries += BUILT_IN[name]()
    for i, q in enumerate(data.get("query", []), start=1):
        if "sql" in q:
            sql = q["sql"]
        elif "file" in q:
            sql = (base / q["file"]).read_text()
        else:
            raise ScenarioError(f"query {i} needs sql or file")
        queries.append(Query(str(q.get("tag", f"query{i}")), sql, dict(q.get("params", {}))))
    steps = [Step(float(s.get("at", 0)), str(s.get("action", "")).lower()) for s in data.get("step", [])]
    order = [int(n) - 1 for n in data["list"]] if "list" in data else None
    return Scenario(
        queries,
        str(data.get("mode", "random")).lower(),
        steps or [Step(0.0, "work")],
        data.get("total"),
        int(data.get("seed", 1)),
        order,
    )
