"""A region under faults and reloads, with real processes: nodes killed (SIGKILL) and hung
(SIGSTOP), a scan worker, Spark's JVM and the gateway killed, a load killed half-way, tables
reloaded under other placements while clients query. Every answer must be right or a retryable
error (503 with Retry-After, or the 410 of a statement lost with its gateway); never a wrong answer,
never part of a table, never one statement answering two queries.

One region (gateway and two nodes as processes, supervised as `cxg up` does) serves TPC-H SF 0.01
for the whole module; each test leaves it whole again. The faults themselves are
`benchmarks.faults`, which `benchmarks.bench_faults` also runs for the report in docs/bench/README.md."""

from __future__ import annotations

import os
import resource
import signal
import threading
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from benchmarks import faults
from benchmarks.faults import NODE_QUERIES, QUERIES, FaultRegion, Report, ask, judge
from gateway import Client, GatewayError
from regions import NODE_SHARES, machine_memory, node_memory_budget
from regions.memory_budgets import JVM_OVERHEAD, SYSTEM_SHARE, jvm_bytes
from regions.spark_session import driver_memory
from storage import Placement, TableSchema, load_table, read_parquet, tpch
from tests.waiting import eventually


def clean(report: Report) -> Report:
    """Right answers or retryable errors while the fault lasted, only right answers once the region
    is whole again, no statement answering twice."""
    assert not report.during.wrong and not report.after.wrong, (report.during.wrong + report.after.wrong)[:5]
    assert all(o == "right" or o.startswith("retryable:") for o in report.during.outcomes), report.during.outcomes
    assert set(report.after.outcomes) == {"right"}, report.after.outcomes
    assert report.during.twice == 0 and report.after.twice == 0
    return report


def test_the_region_answers_right_before_any_fault(live: FaultRegion, expected) -> None:
    assert live.expected() == expected
    tables = Client(live.url).get("/v1/tables")["tables"]
    assert {name: (t["version"], t["available"]) for name, t in tables.items()} == dict.fromkeys(
        faults.TABLES, (1, True)
    )


def test_every_node_process_and_scan_worker_holds_the_region_budget(live: FaultRegion) -> None:
    """`cxg up` derives a budget for each node process from the machine, its scan workers a third of
    it each; every process holds its own, with room left at rest; with Spark's heap they fit the
    machine."""
    config = live.region.config
    budget = node_memory_budget(config, nodes=2)
    assert budget is not None
    worker = budget // NODE_SHARES
    parts = 0
    for role in (r for r in live.region.roles if r.name.startswith("node-")):
        node = Client(f"http://127.0.0.1:{role.port}", timeout=5).get("/v1/node")
        assert (node["memory_budget"], node["worker_memory_budget"]) == (budget, worker)
        family = [live.pid(role.name), *faults.descendants(live.pid(role.name))]
        limits = Counter(resource.prlimit(pid, resource.RLIMIT_DATA)[0] for pid in family)
        assert resource.prlimit(family[0], resource.RLIMIT_DATA)[0] == budget
        assert set(limits) == {budget, worker}, limits  # helpers (fork server, resource tracker): the node's
        assert limits[worker] == node["scan_processes"], limits
        for pid in family:
            status = Path(f"/proc/{pid}/status").read_text()
            held = int(status.split("VmData:")[1].split()[0]) * 1024
            assert held < resource.prlimit(pid, resource.RLIMIT_DATA)[0] / 2, "room left: no 1 GiB reservation"
        parts += NODE_SHARES + node["scan_processes"]
    spark = jvm_bytes(driver_memory(config.spark.driver_memory)) * JVM_OVERHEAD
    assert worker * parts + spark <= machine_memory() * (1 - SYSTEM_SHARE)


@pytest.mark.parametrize("seed", [1, 2])
def test_a_killed_node_gives_right_answers_or_retryable_errors_never_part_of_a_table(
    live: FaultRegion, expected, seed: int
) -> None:
    assert faults.group(live.pid("node-1")), "the node's scan workers run in its process group"
    report = clean(faults.kill_node(live, expected, seed))
    assert sum(report.during.outcomes.values()) > 3
    assert any("node-1 exited" in e for e in live.events) and any("node-1 started again" in e for e in live.events)


def test_a_node_killed_under_queries_over_replicated_tables_costs_no_answer(live: FaultRegion, expected) -> None:
    """A query one node answers whole runs again on the other node holding its tables: the client
    gets its answer, not an error."""
    report = clean(faults.kill_node(live, expected, seed=3, names=("nations",)))
    assert set(report.during.outcomes) == {"right"}, report.during.outcomes
    assert report.during.outcomes["right"] > 3


def test_a_killed_scan_worker_costs_no_query(live: FaultRegion, expected) -> None:
    report = clean(faults.kill_scan_worker(live, expected))
    assert set(report.during.outcomes) == {"right"}, "the node runs a dead worker's blocks itself"


def test_a_missing_bucket_is_named_and_readyz_says_so(live: FaultRegion, expected) -> None:
    os.kill(live.pid("node-0"), signal.SIGSTOP)
    try:
        eventually(lambda: not live.whole(), 10, "readyz says the region is not whole")
        ready = Client(live.url, timeout=5)
        with pytest.raises(GatewayError) as refused:
            ready.get("/readyz")
        assert refused.value.status == 503
        status, doc, headers = ask(live.url, QUERIES["count"])
        assert status == 503 and doc["error"]["code"] == "table_unavailable", doc
        assert "lineitem" in doc["error"]["message"] and "node-0" in doc["error"]["message"]
        assert headers["Retry-After"] == "1"
        status, doc, _ = ask(live.url, QUERIES["nation"])  # replicated: node-1 answers alone
        assert judge("nation", status, doc, {}, expected) == "right"
    finally:
        os.kill(live.pid("node-0"), signal.SIGCONT)
    eventually(live.whole, 30, "the node is taken back when it answers again")
    after = faults.clients(live.url, expected, NODE_QUERIES, faults.for_seconds(1.0), seed=3)
    assert set(after.outcomes) == {"right"} and after.twice == 0


def test_a_hung_node_is_dropped_and_taken_back(live: FaultRegion, expected) -> None:
    report = clean(faults.hang_node(live, expected))
    assert report.notes[0].startswith("dropped by the balancer after")


def test_a_table_whose_only_node_is_hung_is_unavailable_not_undefined(live: FaultRegion) -> None:
    table = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    load_table(live.stores[1:], TableSchema.from_arrow("lonely", table.schema), table)  # on node-1 alone
    eventually(lambda: ask(live.url, "SELECT sum(id) FROM lonely")[0] == 200, 10, "the table is served")
    os.kill(live.pid("node-1"), signal.SIGSTOP)
    try:
        eventually(lambda: live.members() == 1, 10, "the hung node is dropped")
        status, doc, headers = ask(live.url, "SELECT sum(id) FROM lonely")
        assert (status, doc["error"]["code"]) == (503, "table_unavailable"), doc
        assert "node-1" in doc["error"]["message"] and "Retry-After" in headers
    finally:
        os.kill(live.pid("node-1"), signal.SIGCONT)
    eventually(live.whole, 30, "the node is taken back")
    live.stores[1].drop("lonely")
    eventually(lambda: ask(live.url, "SELECT sum(id) FROM lonely")[0] == 400, 10, "a dropped table is undefined")


def test_buckets_with_replicas_are_read_from_a_replica_while_their_node_is_down(
    live: FaultRegion, expected, tpch_files
) -> None:
    source = read_parquet([tpch_files["lineitem"]])
    placement = Placement.parse("hash(l_orderkey) replicas 2", 8)
    schema = replace(tpch.schema_for("lineitem", source.schema), name="lineitem2", placement=placement)
    load_table(live.stores, schema, source)
    sql = QUERIES["q1"].replace("FROM lineitem", "FROM lineitem2")
    assert judge("q1", *ask(live.url, sql), expected) == "right"
    assert Client(live.url).get("/v1/tables")["tables"]["lineitem2"]["rows"] == 60175
    os.kill(live.pid("node-1"), signal.SIGSTOP)
    try:
        eventually(lambda: live.members() == 1, 10, "the hung node is dropped")
        for _ in range(3):  # every bucket read, node-1's from their replicas on node-0
            assert judge("q1", *ask(live.url, sql), expected) == "right"
        status, doc, _ = ask(live.url, QUERIES["count"])  # no replicas: a clear retryable error
        assert status == 503 and doc["error"]["code"] == "table_unavailable"
    finally:
        os.kill(live.pid("node-1"), signal.SIGCONT)
    eventually(live.whole, 30, "the node is taken back")
    killer = threading.Timer(0.5, os.kill, (live.pid("node-0"), signal.SIGKILL))  # while q1 runs again and again
    killer.start()
    down = []

    def queried_until_restarted() -> bool:  # killed mid-query: run again on the replicas, or a retryable error
        outcome = judge("q1", *ask(live.url, sql), expected)
        assert outcome == "right" or outcome.startswith("retryable:"), outcome
        whole = live.whole()
        down.append(killer.finished.is_set() and not whole)
        return any(down) and whole

    eventually(queried_until_restarted, 60, "node-0 killed under queries, missed, then restarted", interval=0)


def test_reloads_under_other_placements_while_clients_query_never_mix_versions(
    live: FaultRegion, expected, tpch_files
) -> None:
    """Every answer is that of one version, none wrong, and the gateway serves the new version and
    placement without a restart; the replaced versions are released once no query reads them."""
    # four reloads: lineitem replicated, hashed, replicated, hashed again; `versioned` at version 5 (500 rows)
    report = clean(faults.reload_under_load(live, expected, tpch_files, reloads=4))
    assert report.during.outcomes["right"] > 10

    def served() -> dict:
        return Client(live.url).get("/v1/tables")["tables"]

    eventually(lambda: served()["lineitem"]["placement"] == "hash(l_orderkey) x8", 5, "the new placement is served")
    assert served()["versioned"]["rows"] == 500
    eventually(lambda: all(s.versions("versioned") == [5] for s in live.stores), 10, "old versions released")


def test_a_new_table_is_served_without_a_restart(live: FaultRegion) -> None:
    table = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    load_table(live.stores, TableSchema.from_arrow("fresh", table.schema), table)
    status, doc, _ = ask(live.url, "SELECT sum(id) FROM fresh")
    assert status == 200 and doc["rows"] == [[6]], doc


def test_spark_killed_join_queries_fail_retryably_then_succeed(live: FaultRegion, expected) -> None:
    report = clean(faults.kill_spark(live, expected))
    assert report.notes == ["the dead JVM reaped: True"]


def test_a_restarted_gateway_never_answers_an_old_statement_with_another_result(live: FaultRegion, expected) -> None:
    report = clean(faults.kill_gateway(live, expected))
    assert report.during.outcomes["retryable:statement_lost"] == 3


def test_a_load_killed_half_way_leaves_the_previous_version_served(live: FaultRegion, expected) -> None:
    report = clean(faults.kill_load(live, expected))
    assert report.notes == ["killed while uploading: True", "table versions unchanged: True"]


def test_a_full_disk_fails_the_load_naming_the_table_and_keeps_the_served_version(
    live: FaultRegion, expected, tpch_files
) -> None:
    report = faults.fill_disk(live, expected, tpch_files)
    if "skipped" in report.fault:
        pytest.skip(report.fault)
    clean(report)
    exited, left = report.notes
    assert "exited 0" not in exited and "filled" in exited and "no space left" in exited, exited
    assert left.endswith("[]"), left
    assert report.during.outcomes["right"] > 0
