"""The load-test simulator against a real local gateway with time-scaled simulation nodes: every
query sent is answered or counted as an error, warm-up and cool-down exclusions are right,
scenario steps are obeyed, the open model keeps its rate; plus the measures, scenario files and
`cxg loadtest` with its logs and plots."""

from __future__ import annotations

import asyncio
import csv
import importlib.util
import itertools
import json
import math
import os
import subprocess
import sys

import pytest

from balancer import NodeServer, SimulationBackend
from balancer.simulation import QueryType
from loadtests import Scenario, Simulator, Target, summarize
from loadtests.measures import Record, counted, stats
from loadtests.scenario import Query, ScenarioError, Step, scenario_from
from regions import EmbeddedRegion, load_config

TYPES = {"a": QueryType(0.004, 3), "b": QueryType(0.012, 5), "slow": QueryType(0.2, 1)}
QUERIES = [Query("a", "SELECT 'a'"), Query("b", "SELECT 'b'")]


def _region(*sets: str, nodes: int = 2, slots: int = 4) -> EmbeddedRegion:
    config = load_config(None, ['region.backend="simulation"', "gateway.port=0", *sets])
    return EmbeddedRegion(config, [NodeServer(f"n{i}", SimulationBackend(TYPES, 1.0), slots) for i in range(nodes)])


@pytest.fixture(scope="module")
def region():
    with _region() as r:
        yield r


def _run(region, users: int, scenario: Scenario, **options):
    return asyncio.run(Simulator([Target(1, region.url)], users, scenario, sample_every=0.02, **options).run())


# ---- measures on known records --------------------------------------------------------------------


def _record(number: int, sent: float, answered: float, status: int = 200, code: str = "") -> Record:
    return Record(number, 0, 1, "a", 0, sent, sent, answered, status, code)


def test_exclusion_counts_answers_in_arrival_order_and_t_spans_them() -> None:
    # answers arrive out of sending order: #3 is answered first
    records = [
        _record(1, 0.0, 5.0),
        _record(2, 0.0, 3.0),
        _record(3, 0.0, 1.0),
        _record(4, 1.0, 2.0),
        _record(5, 2.0, 4.0),
    ]
    kept, span = counted(records, 1)
    assert [r.number for r in kept] == [4, 2, 5]  # answers 2..4 of 5
    assert span == pytest.approx(4.0 - 1.0)  # from the 1st answer to the 4th
    summary = summarize(records, 1)
    assert (summary.sent, summary.counted, summary.excluded) == (5, 3, 1)
    assert summary.throughput == pytest.approx(3 / 3.0)


def test_mean_sigma_percentiles_and_separate_error_counts() -> None:
    times = [0.1 * i for i in range(1, 101)]
    records = [_record(i, 0.0, t) for i, t in enumerate(times, start=1)]
    records += [_record(101, 0.0, 0.5, 503, "queue_full"), _record(102, 0.0, 0.5, 400, "syntax_error")]
    s = stats(records)
    mean = sum(times) / 100
    assert s.mean == pytest.approx(mean)
    assert s.sigma == pytest.approx(math.sqrt(sum((t - mean) ** 2 for t in times) / 100))
    assert s.p50 == pytest.approx(5.0, rel=0.01) and s.p99 == pytest.approx(9.9, rel=0.01)
    assert (s.count, s.ok, s.errors, s.rejections) == (102, 100, 1, 1)


def test_scenario_files_and_their_checks(tmp_path) -> None:
    scenario = scenario_from({"queries": "tpch14", "mode": "fromlist", "list": [3, 1, 14]})
    assert [scenario.queries[i].tag for i in scenario.order] == ["q3", "q1", "q14"]
    assert scenario.expected == 3
    endless = scenario_from({"queries": "tpch22", "mode": "sequential"})
    assert endless.steps[-1] == Step(60.0, "stop")  # added: random/sequential need an end
    (tmp_path / "mine.sql").write_text("SELECT 42")
    own = scenario_from({"query": [{"tag": "x", "file": "mine.sql"}], "total": 5}, tmp_path)
    assert own.queries == [Query("x", "SELECT 42")]
    for bad in (
        {"queries": "tpch99"},
        {"queries": "tpch14", "mode": "shuffled"},
        {"queries": "tpch14", "step": [{"at": 0, "action": "nap"}]},
        {"queries": "tpch14", "list": [15]},
        {"queries": "tpch14", "extra": 1},
        {},
    ):
        with pytest.raises(ScenarioError):
            scenario_from(bad)


def test_random_choices_depend_only_on_the_seed() -> None:
    first, second = (
        Scenario(QUERIES, "random", total=50, seed=3).picker(),
        Scenario(QUERIES, "random", total=50, seed=3).picker(),
    )
    assert [first.pick(n, n % 7) for n in range(1, 51)] == [second.pick(n, 0) for n in range(1, 51)]
    assert first.pick(51, 0) is None


# ---- against a gateway --------------------------------------------------------------------------


def test_every_query_sent_is_answered_once(region) -> None:
    scenario = Scenario.uniform(QUERIES, 120, seed=2)
    run = _run(region, 12, scenario)
    assert [r.number for r in run.records] == list(range(1, 121))
    assert all(r.ok and r.answered is not None and r.statement for r in run.records)
    assert [r.tag for r in run.records] == [QUERIES[i].tag for i in scenario.order]
    assert sum(r.rows for r in run.records) == sum(TYPES[r.tag].rows for r in run.records)
    summary = summarize(run.records, 10)
    assert (summary.sent, summary.answered, summary.counted, summary.excluded) == (120, 120, 100, 10)
    assert summary.overall.ok == 100 and set(summary.by_type) == {"a", "b"}
    assert sum(s.count for s in summary.by_type.values()) == 100
    assert run.queue and all(q[1] == 1 for q in run.queue)


def test_errors_and_rejections_are_counted_apart(region) -> None:
    queries = [Query("a", "SELECT 1"), Query("nope", "SELECT 1")]
    run = _run(region, 1, Scenario(queries, "fromlist", order=[0, 1, 0, 1, 1]))
    s = summarize(run.records, 0)
    assert (s.sent, s.overall.ok, s.overall.errors, s.overall.rejections) == (5, 2, 3, 0)
    assert {r.code for r in run.records if not r.ok} == {"unknown_query_type"}  # 422 from the node
    with _region("gateway.max_queue=1", nodes=1, slots=1) as small:
        run = _run(small, 8, Scenario([Query("slow", "SELECT 1")], "random", total=24))
    s = summarize(run.records, 0)
    assert s.sent == 24 == s.answered
    assert s.overall.ok + s.overall.rejections == 24 and s.overall.errors == 0
    assert s.overall.ok >= 3 and s.overall.rejections > 0  # one running, one buffered, one queued at a time
    assert {r.code for r in run.records if r.rejected} == {"queue_full"}


def test_scenario_steps_are_obeyed(region) -> None:
    steps = [Step(0.0, "work"), Step(0.25, "sleep"), Step(0.5, "work"), Step(0.75, "stop")]
    run = _run(region, 6, Scenario(QUERIES, "random", steps))
    at = {event: t for t, event, _ in run.events if event in ("sleep", "stop")}
    resumed = [t for t, event, _ in run.events if event == "work"][-1]
    sent = [r.sent for r in run.records]
    assert not [t for t in sent if at["sleep"] < t < resumed]  # nothing new while asleep
    assert not [t for t in sent if t > at["stop"]]  # nothing new after stop
    assert [t for t in sent if t < at["sleep"]] and [t for t in sent if resumed < t < at["stop"]]
    assert all(r.answered is not None for r in run.records)  # the run ended once every answer was in


def test_the_open_model_keeps_its_rate_whatever_the_answers_do() -> None:
    with _region("gateway.max_queue=100", nodes=1, slots=1) as region:  # 0.2 s a query, one slot: 5 answers/s
        run = _run(region, 4, Scenario([Query("slow", "SELECT 1")], "random", total=30), model="open", rate=30.0)
    scheduled = [r.scheduled for r in run.records]
    assert [round(b - a, 9) for a, b in itertools.pairwise(scheduled)] == [round(1 / 30, 9)] * 29
    assert all(r.sent >= r.scheduled for r in run.records)  # none sent before it was due
    # sent on schedule though answers lag: more in flight at once than the 4 users a closed model would allow
    in_flight = max(sum(o.sent <= r.sent < o.answered for o in run.records) for r in run.records)
    assert in_flight > 4
    # queueing shows in response times measured from the schedule: the last query, due within 1 s of the
    # first, waited for the 29 before it in the one slot (a bound the nodes' sleeps guarantee, load or not)
    assert run.records[-1].response > 29 * TYPES["slow"].seconds - 1
    assert summarize(run.records, 0).overall.ok + summarize(run.records, 0).overall.rejections == 30


def test_cxg_loadtest_writes_logs_plots_and_summary(region, tmp_path) -> None:
    out = tmp_path / "run"
    scenario = tmp_path / "s.toml"
    scenario.write_text(
        'mode = "fromlist"\nlist = [1, 2, 1, 1, 2, 2, 1, 2, 1, 1]\n'
        '[[query]]\ntag = "a"\nsql = "SELECT 1"\n[[query]]\ntag = "b"\nsql = "SELECT 2"\n'
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cxg",
            "loadtest",
            "--gateway",
            f"1={region.url}",
            "--users",
            "3",
            "--scenario",
            str(scenario),
            "--exclude",
            "2",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 of 10 queries counted" in " ".join(done.stdout.split())
    with (out / "queries.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 10 and sorted(int(r["number"]) for r in rows) == list(range(1, 11))
    assert all(r["status"] == "200" and float(r["response_s"]) > 0 and int(r["answer_bytes"]) > 0 for r in rows)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["counted"] == 6 and summary["overall"]["ok"] == 6 and set(summary["by_type"]) == {"a", "b"}
    events = (out / "events.csv").read_text()
    assert "start" in events and "end" in events
    assert (out / "queue.csv").read_text().startswith("time_s,region,queue_length,in_flight")
    for png in ("response_times.png", "queue_length.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


LOCUST = ["--users", "3", "--spawn-rate", "3", "--run-time", "60s", "--json"]


@pytest.mark.skipif(importlib.util.find_spec("locust") is None, reason='needs the "locust" extra')
def test_locustfile_runs_a_scenario_through_the_gateway(region, tmp_path) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text(
        'mode = "fromlist"\nlist = [1, 2, 1, 1, 2, 2, 1, 2, 1, 1]\n'
        '[[query]]\ntag = "a"\nsql = "SELECT 1"\n[[query]]\ntag = "b"\nsql = "SELECT 2"\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "locust", "-f", "loadtests/locustfile.py", "--host", region.url, "--headless", *LOCUST],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "CXG_SCENARIO": str(scenario)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    stats = json.loads(done.stdout)
    assert sorted((s["method"], s["name"], s["num_requests"], s["num_failures"]) for s in stats) == [
        ("POST", "a", 6, 0),
        ("POST", "b", 4, 0),
    ]
