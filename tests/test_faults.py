"""A region under faults and reloads, with real processes: nodes killed (SIGKILL) and hung
(SIGSTOP), Spark's JVM killed, the gateway killed, tables reloaded under other placements while
clients query. Every answer must be right or a retryable error (503 with Retry-After, or the 410
of a statement lost with its gateway); never a wrong answer, never part of a table.

One region (gateway and two nodes as processes, supervised as `cxg up` does) serves TPC-H SF 0.01
for the whole module; each test leaves it whole again."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from gateway import Client, GatewayError, load_config
from regions import LocalRegion
from storage import Placement, Store, load_table, read_parquet, tpch
from tests.http import http

TABLES = ("lineitem", "orders", "customer", "nation")
RETRYABLE = {"table_unavailable", "node_unavailable", "node_lost", "no_nodes", "spark_unavailable"}
# queries over hash-placed tables (on both nodes), a join, and a replicated table
QUERIES = {
    "count": "SELECT count(*) AS n FROM lineitem",
    "q1": "SELECT l_returnflag, l_linestatus, sum(l_quantity) AS q, count(*) AS n FROM lineitem "
    "GROUP BY l_returnflag, l_linestatus ORDER BY l_returnflag, l_linestatus",
    "having": "SELECT o_custkey, count(*) AS n FROM orders GROUP BY o_custkey HAVING count(*) > 25 ORDER BY o_custkey",
    "join": "SELECT count(*) AS n, sum(l_extendedprice) AS s FROM lineitem JOIN orders ON l_orderkey = o_orderkey "
    "WHERE o_orderstatus = 'F'",
    "nation": "SELECT count(*) AS n, sum(n_regionkey) AS s FROM nation",
}
NODE_QUERIES = ("count", "q1", "having", "nation")  # answered by the nodes, no Spark


@dataclass
class Running:
    region: LocalRegion
    url: str
    stores: list[Store]
    events: list[str]

    def role(self, name: str):
        return next(r for r in self.region.roles if r.name == name)

    def pid(self, name: str) -> int:
        return self.role(name).process.pid


def _value(v: object) -> object:
    """Values compared as the JSON answer carries them (decimals as text, floats rounded)."""
    if isinstance(v, Decimal):
        return str(v)
    return round(v, 4) if isinstance(v, float) else v


def _rows(doc: dict) -> list[tuple]:
    return [tuple(map(_value, row)) for row in doc["rows"]]


def ask(url: str, sql: str, timeout: float = 60.0) -> tuple[int, dict, dict]:
    reply = http("POST", f"{url}/v1/statements", {"sql": sql, "wait": timeout}, timeout=timeout + 30)
    return reply.status, reply.json(), reply.headers


@pytest.fixture(scope="module")
def expected(duck) -> dict[str, list[tuple]]:
    return {name: [tuple(map(_value, row)) for row in duck.sql(sql).fetchall()] for name, sql in QUERIES.items()}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, tpch_files) -> Iterator[Running]:
    root = tmp_path_factory.mktemp("faults")
    stores = [Store(root / f"node-{i}", node=f"node-{i}") for i in range(2)]
    for name in TABLES:
        source = read_parquet([tpch_files[name]])
        load_table(stores, tpch.schema_for(name, source.schema, buckets=8), source)
    sets = [
        "gateway.port=0",
        "region.first_port=0",
        f'storage.data=["{stores[0].root}", "{stores[1].root}"]',
        'spark.master="local[1]"',
        'spark.driver_memory="1g"',
        "spark.warm_up=false",
    ]
    config = load_config(None, sets)
    region = LocalRegion(config, [x for s in sets for x in ("--set", s)], root / "run")
    url = region.start(timeout=120)
    events: list[str] = []
    stop = threading.Event()

    def supervise() -> None:  # what `cxg up` does
        while not stop.is_set():
            events.extend(region.supervise())
            stop.wait(0.1)

    supervisor = threading.Thread(target=supervise, daemon=True)
    supervisor.start()
    try:
        yield Running(region, url, stores, events)
    finally:
        stop.set()
        supervisor.join()
        region.stop()


def wait_until(check: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.1)


def whole(live: Running) -> bool:
    try:
        return Client(live.url, timeout=5).get("/readyz").get("ready") is True
    except GatewayError:
        return False


def judge(name: str, status: int, doc: dict, headers: dict, expected: dict) -> str:
    """'right', 'retryable', or raise: an answer is right, or a retryable error, never wrong."""
    if status == 200 and doc.get("state") == "succeeded":
        assert _rows(doc) == expected[name], f"{name}: a wrong answer {doc['rows']} (expected {expected[name]})"
        assert doc.get("truncated") is False
        return "right"
    error = doc.get("error") or {}
    assert status == 503 and error.get("code") in RETRYABLE, f"{name}: {status} {doc}"
    assert "Retry-After" in headers, f"{name}: a retryable error says when to retry"
    return "retryable"


def hammer(live: Running, expected: dict, names: tuple[str, ...], seconds: float, seed: int, clients: int = 3):
    """Clients sending the queries in a seeded random order for `seconds`; the outcomes counted."""
    outcomes: list[str] = []
    deadline = time.monotonic() + seconds

    def client(k: int) -> None:
        rng = random.Random(seed * 100 + k)
        while time.monotonic() < deadline:
            name = rng.choice(names)
            outcomes.append(judge(name, *ask(live.url, QUERIES[name]), expected))

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    return outcomes


def test_the_region_answers_right_before_any_fault(live: Running, expected) -> None:
    for name in QUERIES:
        assert judge(name, *ask(live.url, QUERIES[name]), expected) == "right"
    tables = Client(live.url).get("/v1/tables")["tables"]
    assert {name: (t["version"], t["available"]) for name, t in tables.items()} == dict.fromkeys(TABLES, (1, True))


@pytest.mark.parametrize("seed", [1, 2])
def test_a_killed_node_gives_right_answers_or_retryable_errors_never_part_of_a_table(
    live: Running, expected, seed: int
) -> None:
    node = live.pid("node-1")
    group = [p for p in _group(node) if p != node]
    assert group, "the node's scan workers run in its process group"
    killer = threading.Timer(random.Random(seed).uniform(0.3, 1.5), os.kill, (node, signal.SIGKILL))
    killer.start()
    outcomes = hammer(live, expected, NODE_QUERIES, 4.0, seed)
    killer.join()
    assert "retryable" in outcomes or "right" in outcomes
    wait_until(lambda: not [p for p in group if _alive(p)], 10, "the dead node's scan workers are gone")
    wait_until(lambda: whole(live), 60, "the node restarted and rejoined with its data")
    assert any("node-1 exited" in e for e in live.events) and any("node-1 started again" in e for e in live.events)
    assert set(hammer(live, expected, NODE_QUERIES, 1.0, seed)) == {"right"}


def test_a_missing_bucket_is_named_and_readyz_says_so(live: Running, expected) -> None:
    os.kill(live.pid("node-0"), signal.SIGSTOP)
    try:
        wait_until(lambda: not whole(live), 10, "readyz says the region is not whole")
        ready = Client(live.url, timeout=5)
        with pytest.raises(GatewayError) as refused:
            ready.get("/readyz")
        assert refused.value.status == 503
        started = time.monotonic()
        status, doc, headers = ask(live.url, QUERIES["count"])
        assert status == 503 and doc["error"]["code"] == "table_unavailable", doc
        assert "lineitem" in doc["error"]["message"] and "node-0" in doc["error"]["message"]
        assert headers["Retry-After"] == "1"
        status, doc, _ = ask(live.url, QUERIES["nation"])  # replicated: node-1 answers alone
        assert judge("nation", status, doc, {}, expected) == "right"
        assert time.monotonic() - started < 10, "queries that do not need the hung node are not held behind it"
    finally:
        os.kill(live.pid("node-0"), signal.SIGCONT)
    wait_until(lambda: whole(live), 30, "the node is taken back when it answers again")
    assert set(hammer(live, expected, NODE_QUERIES, 1.0, 3)) == {"right"}


def test_a_hung_node_is_dropped_within_a_bound(live: Running, expected) -> None:
    assert judge("count", *ask(live.url, QUERIES["count"]), expected) == "right"
    os.kill(live.pid("node-1"), signal.SIGSTOP)
    try:
        started = time.monotonic()
        wait_until(lambda: len(Client(live.url, timeout=5).cluster()["members"]) == 1, 10, "the hung node is dropped")
        assert time.monotonic() - started < 3.0
    finally:
        os.kill(live.pid("node-1"), signal.SIGCONT)
    wait_until(lambda: whole(live), 30, "the node is taken back")


def test_buckets_with_replicas_are_read_from_a_replica_while_their_node_is_down(
    live: Running, expected, tpch_files
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
        wait_until(lambda: len(Client(live.url, timeout=5).cluster()["members"]) == 1, 10, "the hung node is dropped")
        for _ in range(3):  # every bucket read, node-1's from their replicas on node-0
            assert judge("q1", *ask(live.url, sql), expected) == "right"
        status, doc, _ = ask(live.url, QUERIES["count"])  # no replicas: a clear retryable error
        assert status == 503 and doc["error"]["code"] == "table_unavailable"
    finally:
        os.kill(live.pid("node-1"), signal.SIGCONT)
    wait_until(lambda: whole(live), 30, "the node is taken back")
    node = live.pid("node-0")
    threading.Timer(0.5, os.kill, (node, signal.SIGKILL)).start()
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:  # killed mid-query: run again on the replicas, or a retryable error
        judge("q1", *ask(live.url, sql), expected)
    wait_until(lambda: whole(live), 60, "the node restarted")


def _version_table(i: int) -> pa.Table:
    """Version i of table `versioned`: 100·(i+1) rows, all v = i (a mix of two versions shows)."""
    rows = 100 * (i + 1)
    return pa.table({"k": pa.array(range(rows), pa.int64()), "v": pa.array([i] * rows, pa.int64())})


def test_reloads_under_other_placements_while_clients_query_never_mix_versions(
    live: Running, expected, tpch_files
) -> None:
    """Tables reloaded (the same rows under another placement; a table whose rows change) while
    clients query: every answer is that of one version, none wrong, and the gateway serves the new
    version and placement without a restart."""
    sources = {name: read_parquet([tpch_files[name]]) for name in ("lineitem", "orders")}
    schemas = {name: tpch.schema_for(name, s.schema, buckets=8) for name, s in sources.items()}
    versioned = pa.table({"k": pa.array([], pa.int64()), "v": pa.array([], pa.int64())}).schema
    from storage import TableSchema

    hashed = TableSchema.from_arrow("versioned", versioned, placement=Placement.parse("hash(k)", 4))
    load_table(live.stores, hashed, _version_table(0))
    first = ask(live.url, "SELECT count(*), sum(v) FROM versioned")[1]
    assert first.get("rows") == [[100, 0]], f"a new table is served at once: {first}"
    wrong: list[str] = []
    done = threading.Event()
    counts: dict[str, int] = {"right": 0, "retryable": 0}

    def query(k: int) -> None:
        rng = random.Random(k)
        while not done.is_set():
            name = rng.choice(("join", "count", "having", "versioned"))
            if name == "versioned":
                status, doc, _ = ask(live.url, "SELECT count(*), sum(v) FROM versioned")
                if status != 200:
                    wrong.append(f"versioned: {status} {doc}")
                    continue
                n, total = doc["rows"][0]
                if n % 100 or total != (n // 100 - 1) * n:
                    wrong.append(f"versioned: {n} rows summing to {total} are no one version")
                counts["right"] += 1
                continue
            try:
                counts[judge(name, *ask(live.url, QUERIES[name]), expected)] += 1
            except AssertionError as e:
                wrong.append(str(e))

    with ThreadPoolExecutor(3) as pool:
        clients = [pool.submit(query, k) for k in range(3)]
        try:
            for i in range(1, 7):
                placement = Placement() if i % 2 else Placement.parse("hash(l_orderkey)", 8)
                load_table(live.stores, replace(schemas["lineitem"], placement=placement), sources["lineitem"])
                key = "o_custkey" if i % 2 else "o_orderkey"
                load_table(
                    live.stores,
                    replace(schemas["orders"], placement=Placement.parse(f"hash({key})", 8)),
                    sources["orders"],
                )
                load_table(live.stores, hashed, _version_table(i))
                time.sleep(0.4)
        finally:
            done.set()
            for c in clients:
                c.result()
    assert not wrong, wrong[:5]
    assert counts["right"] > 10

    def served() -> dict:
        return Client(live.url).get("/v1/tables")["tables"]

    wait_until(lambda: served()["lineitem"]["placement"] == "hash(l_orderkey) x8", 5, "the new placement is served")
    assert served()["versioned"]["rows"] == 700
    assert ask(live.url, "SELECT count(*), sum(v) FROM versioned")[1]["rows"] == [[700, 6 * 700]]
    wait_until(lambda: all(s.versions("versioned") == [7] for s in live.stores), 10, "old versions released")


def test_a_new_table_is_served_without_a_restart(live: Running) -> None:
    table = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    from storage import TableSchema

    load_table(live.stores, TableSchema.from_arrow("fresh", table.schema), table)
    wait_until(lambda: ask(live.url, "SELECT sum(id) FROM fresh")[0] == 200, 5, "the new table is served")
    assert ask(live.url, "SELECT sum(id) FROM fresh")[1]["rows"] == [[6]]


def test_spark_killed_join_queries_fail_retryably_then_succeed(live: Running, expected) -> None:
    assert judge("join", *ask(live.url, QUERIES["join"]), expected) == "right"  # Spark is up
    jvm = next(p for p in _descendants(live.pid("gateway")) if "java" in _command(p))
    os.kill(jvm, signal.SIGKILL)
    wait_until(lambda: not _alive(jvm), 10, "the JVM is gone")
    outcomes = [judge("join", *ask(live.url, QUERIES["join"], 180), expected) for _ in range(2)]
    assert outcomes[-1] == "right", "the session is started again and later queries succeed"
    assert not [p for p in _descendants(live.pid("gateway")) if p == jvm], "the dead JVM is reaped"
    assert judge("count", *ask(live.url, QUERIES["count"]), expected) == "right"


def test_a_restarted_gateway_never_answers_an_old_statement_with_another_result(live: Running, expected) -> None:
    status, doc, _ = ask(live.url, QUERIES["nation"])
    old = doc["id"]
    os.kill(live.pid("gateway"), signal.SIGKILL)
    wait_until(lambda: whole(live), 60, "the gateway restarted and its nodes rejoined")
    reply = http("GET", f"{live.url}/v1/statements/{old}")
    assert reply.status == 410 and reply.json()["error"]["code"] == "statement_lost", reply.json()
    status, doc, _ = ask(live.url, QUERIES["nation"])
    assert judge("nation", status, doc, {}, expected) == "right" and doc["id"] != old


def test_a_load_killed_half_way_leaves_the_previous_version_served(live: Running, expected, tmp_path: Path) -> None:
    """`cxg load` killed while it uploads: nothing of it is served, the table answers as before."""
    import subprocess
    import sys

    before = ask(live.url, QUERIES["count"])[1]["rows"]
    command = [
        sys.executable,
        "-m",
        "cxg",
        "--set",
        f'storage.data=["{live.stores[0].root}", "{live.stores[1].root}"]',
        "--set",
        'spark.master="local[1]"',
        "--set",
        'spark.driver_memory="1g"',
        "load",
        "tpch",
        "--sf",
        "0.05",
        "--tables",
        "lineitem",
        "--mode",
        "replace",
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until(
            lambda: any(
                p.name.endswith((".arrow", ".arrow.zst"))
                and p.stat().st_mtime > time.time() - 30
                and "-" in p.name
                and not _served(live.stores[0], p.name)
                for p in (live.stores[0].root / "lineitem").iterdir()
            ),
            240,
            "the load uploads blocks",
        )
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert ask(live.url, QUERIES["count"])[1]["rows"] == before
    assert all(s.versions("lineitem")[-1] == live.stores[0].versions("lineitem")[-1] for s in live.stores)


def _served(store: Store, name: str) -> bool:
    return any(b.file == name for b in store.table("lineitem").blocks)


# ---- processes -------------------------------------------------------------------------------


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _alive(pid: int) -> bool:
    try:
        return _stat(pid)[0] != "Z"
    except OSError:
        return False


def _group(pid: int) -> list[int]:
    """The processes of `pid`'s process group."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[2]) == pid:
                found.append(int(stat.parent.name))
    return found


def _descendants(pid: int) -> list[int]:
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        children = [p for p, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
