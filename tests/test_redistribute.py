"""Moving tables while queries keep answering: the Balance policy and the plan of a move on
hand-made tables; the store's part (blocks kept across versions, a table retired while a query
reads it); and live, a region of processes whose table is re-owned over a node added at run time,
then given back when the node is taken out, and balanced on the load measured, every answer right
before, during and after each move."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from benchmarks import faults
from benchmarks.faults import NODE_QUERIES, FaultRegion
from gateway import Client, GatewayError, free_port
from regions import RegionView, measure_costs, plan_nodes, plan_placement, plan_rebalance, run_move, wait_served
from storage import (
    BucketMove,
    BucketWork,
    LoadOptions,
    Placement,
    RedistributionError,
    Store,
    TableNotFoundError,
    TableSchema,
    balance,
    costs,
    load_table,
    moved,
    plan_move,
    spread,
)
from storage.errors import VersionConflictError
from tests.waiting import eventually

# ---- the Balance policy ---------------------------------------------------------------------------


def _costs(**nodes: list[float]) -> dict:
    """node -> its buckets' costs; node i's buckets are numbered from 10·i."""
    return {n: {("t", i * 10 + k): c for k, c in enumerate(values)} for i, (n, values) in enumerate(nodes.items())}


def test_balance_moves_from_the_heaviest_node_to_the_lightest_until_no_bucket_narrows_the_gap() -> None:
    table = _costs(a=[0.4, 0.2, 0.1, 0.1], b=[0.1], c=[])
    moves = balance(table, ["a", "b", "c"], threshold=0.0)
    assert moves[0] == BucketMove("t", 0, "a", "c", 0.4)  # a: 0.8, c: 0; the bucket nearest half the gap
    load = {n: sum(table[n].values()) for n in table}
    for m in moves:
        load[m.source] -= m.cost
        load[m.target] += m.cost
    assert max(load.values()) - min(load.values()) <= 0.2 + 1e-9  # as even as whole buckets allow
    assert sum(load.values()) == pytest.approx(0.9)  # moved, not made


def test_balance_stops_below_the_threshold_and_moves_no_idle_bucket() -> None:
    assert balance(_costs(a=[0.3, 0.1], b=[0.3]), ["a", "b"], threshold=0.15) == []
    assert balance(_costs(a=[0.0, 0.0, 0.0], b=[]), ["a", "b"], threshold=0.0) == []  # no load to move
    assert balance(_costs(a=[0.5], b=[0.0]), ["a", "b"], threshold=0.0) == []  # moving it only swaps them


def test_a_node_taken_out_spreads_its_buckets_over_the_lightest() -> None:
    table = _costs(a=[0.3, 0.2], b=[0.1], c=[0.4])
    moves = spread(table, ["a"], ["b", "c"])
    assert [(m.bucket, m.target) for m in moves] == [(0, "b"), (1, "c")]  # then b and c are even: fewer buckets
    assert spread({"a": {("t", 0): 0.0, ("t", 1): 0.0}}, ["a"], ["b", "c"])[1].target == "c"  # no load: by count


def test_costs_are_the_share_of_a_nodes_slot_time_between_two_readings() -> None:
    work = BucketWork()
    work.record("t", {0: 300}, {0: 1.0})  # before the window
    before = {"n": work.to_json()}
    work.record("t", {0: 300, 1: 100}, {0: 0.5, 1: 1.5})  # bucket 1: fewer rows, more time
    work.record("u", {}, {})
    table = costs(before, {"n": work.to_json()}, window=10.0, slots={"n": 2})
    assert table == {"n": {("t", 0): pytest.approx(0.025), ("t", 1): pytest.approx(0.075)}}
    assert work.to_json()["busy"] == 3.0 and work.to_json()["tables"]["t"]["0"] == [1.5, 600]


# ---- the plan of a move ---------------------------------------------------------------------------

SCHEMA = TableSchema.from_arrow("t", pa.schema([("k", pa.int64()), ("v", pa.string())]))


def _hashed(owners: list[str], replicas: int = 1) -> TableSchema:
    placement = Placement("hash", ("k",), len(owners), tuple(owners), replicas)
    return TableSchema("t", SCHEMA.columns, ("k",), placement)


def test_a_node_added_gains_only_the_buckets_it_takes_and_the_others_keep_theirs() -> None:
    schema = _hashed(["a", "b", "a", "b"])
    placement = moved(schema.placement, [BucketMove("t", 2, "a", "c", 0.1)])
    move = plan_move(schema, 3, "d1", ["a", "b"], placement, [])
    assert move.nodes == ("a", "b", "c") and move.base == 3 and move.data == "d1"
    assert move.keep == {"a": (0,), "b": (1, 3), "c": ()}
    assert move.gains == {"a": (), "b": (), "c": (2,)}
    assert move.reads == {"a": (2,)} and move.retire == () and move.copied == 1


def test_a_node_left_without_buckets_retires_the_table() -> None:
    schema = _hashed(["a", "b", "c", "a"])
    placement = moved(schema.placement, [BucketMove("t", 2, "c", "b", 0.1)])
    move = plan_move(schema, 1, "d1", ["a", "b", "c"], placement, [])
    assert move.retire == ("c",) and move.gains == {"a": (), "b": (2,)}


def test_replicas_move_with_their_ring_and_a_down_holder_is_read_from_its_replica() -> None:
    schema = _hashed(["a", "b", "c", "a"], replicas=2)  # ring a, b, c: bucket 0 on a and b, 1 on b and c, ...
    placement = moved(schema.placement, [BucketMove("t", 0, "a", "b", 0.1)])  # ring b, c, a: 0 on b and c
    move = plan_move(schema, 1, "d1", ["a", "b", "c"], placement, [])
    assert move.keep == {"b": (0, 1, 3), "c": (1, 2), "a": (2, 3)} and move.gains["c"] == (0,)
    assert move.reads == {"a": (0,)}
    down = plan_move(schema, 1, "d1", ["b", "c"], placement, [])  # a does not answer: replicas are read
    assert down.reads == {"b": (0, 3), "c": (2,)}


def test_a_copy_to_another_region_copies_every_bucket_and_keeps_the_rows_identity() -> None:
    schema = _hashed(["a", "b", "a", "b"])
    move = plan_move(schema, 7, "d7", ["a", "b"], schema.placement.with_owners(["x"]), [], False, ["x", "y"])
    assert move.gains == {"x": (0, 1, 2, 3)} and move.keep == {"x": ()} and move.data == "d7"
    assert move.retire == ("y",) and not move.local


def test_a_replicated_table_is_copied_to_a_node_added() -> None:
    move = plan_move(SCHEMA, 2, "d2", ["a", "b"], Placement(), ["a", "b", "c"])
    assert move.keep == {"a": (0,), "b": (0,), "c": ()} and move.gains["c"] == (0,) and move.reads == {"a": (0,)}


def test_another_kind_or_key_reads_every_row_and_places_it_again() -> None:
    """Hash-placed to replicated: every bucket read once, every node gains the whole table and keeps
    nothing of the old version; replicated to hash: read from one holder, each owner gains its
    buckets and a node owning none retires it; other keys: every bucket again."""
    schema = _hashed(["a", "b", "a", "b"])
    whole = plan_move(schema, 1, "d", ["a", "b"], Placement(), ["a", "b"])
    assert whole.reads == {"a": (0, 2), "b": (1, 3)} and whole.gains == {"a": (0,), "b": (0,)}
    assert whole.keep == {"a": (), "b": ()} and whole.retire == ()
    hashed = plan_move(SCHEMA, 2, "d", ["a", "b", "c"], Placement("hash", ("k",), 4).with_owners(["a", "b"]), [])
    assert hashed.reads == {"a": (0,)} and hashed.gains == {"a": (0, 2), "b": (1, 3)} and hashed.retire == ("c",)
    rekeyed = plan_move(schema, 1, "d", ["a", "b"], Placement("hash", ("v",), 4, ("a", "b", "a", "b")), [])
    assert rekeyed.reads == {"a": (0, 2), "b": (1, 3)} and rekeyed.copied == 4 and not any(rekeyed.keep.values())


def test_a_move_needs_a_holder_of_every_bucket() -> None:
    schema = _hashed(["a", "b"])
    with pytest.raises(RedistributionError, match="no node holding bucket 1"):
        plan_move(schema, 1, "d", ["a"], schema.placement.with_owners(["a", "c"]), [])


# ---- the store's part ---------------------------------------------------------------------------


def _store_table(root: Path) -> Store:
    store = Store(root, node="a")
    schema = TableSchema("t", SCHEMA.columns, (), Placement("hash", ("k",), 4, ("a",) * 4))
    load_table([store], schema, pa.table({"k": list(range(100)), "v": [str(i) for i in range(100)]}))
    return store


def test_a_version_keeps_the_blocks_of_the_buckets_asked_and_checks_its_base(tmp_path: Path) -> None:
    store = _store_table(tmp_path)
    old = store.table("t")
    schema = old.schema
    writer = store.writer(schema, old.manifest.sizing, load_id="0123456789ab")
    with pytest.raises(VersionConflictError, match="not 9"):
        writer.commit(keep=(0, 1), base=9)
    manifest = writer.commit(keep=(0, 1), base=1, data=old.manifest.data)
    kept = {b.bucket for b in manifest.blocks}
    assert kept == {0, 1} and manifest.data == old.manifest.data and manifest.version == 2
    assert store.table("t", 1).rows == 100  # the version replaced is still readable


def test_a_retired_table_is_gone_from_listings_but_a_pinned_version_still_reads(tmp_path: Path) -> None:
    store = _store_table(tmp_path)
    assert store.retire("t") == 1
    assert store.tables() == [] and store.retired() == ["t"]
    with pytest.raises(TableNotFoundError):
        store.table("t")
    assert store.table("t", 1).to_arrow().num_rows == 100
    again = _store_table(tmp_path)  # loaded again: numbered past what it kept
    assert again.table("t").version == 2 and again.versions("t") == [1, 2]
    assert again.revert("t", again.table("t").manifest.load)  # undone: retired again, not version 1 back
    assert again.tables() == []
    assert store.release("t", 1) and not (tmp_path / "t").exists()


# ---- live: a region of processes ------------------------------------------------------------------


@pytest.fixture(scope="module")
def third_node(live: FaultRegion, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A node started while the region runs, with an empty data directory: `node-2`."""
    root = tmp_path_factory.mktemp("node-2")
    args = ["node", "--name", "node-2", "--data", str(root / "data"), "--port", str(free_port())]
    process = subprocess.Popen(
        [sys.executable, "-m", "cxg", *args, "--upstream", live.url, "--memory", "none", "--processes", "0"],
        stdout=(root / "out").open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        eventually(lambda: live.members() == 3, 60, "node-2 joined")
        yield "node-2"
    finally:
        process.kill()
        process.wait()


def _moving(live: FaultRegion, expected: dict, spark, planned, names=NODE_QUERIES) -> faults.Tally:
    """Run a planned move while three clients query the region; what they got."""
    done = threading.Event()
    tally: list[faults.Tally] = []
    watcher = threading.Thread(
        target=lambda: tally.append(faults.clients(live.url, expected, names, done.is_set, seed=7))
    )
    watcher.start()
    try:
        view = RegionView.of(Client(live.url))
        for move in planned(view):
            ran = run_move(spark, move, view, view, LoadOptions())
            wait_served(view, ran)
    finally:
        done.set()
        watcher.join()
    return tally[0]


def _right(tally: faults.Tally) -> None:
    assert not tally.wrong, tally.wrong[:5]
    assert set(tally.outcomes) == {"right"} and tally.twice == 0, tally.outcomes


def test_a_node_added_takes_buckets_and_serves_them_without_a_restart(live, expected, spark, third_node) -> None:
    before = Client(live.url).tables()["lineitem"]
    tally = _moving(live, expected, spark, lambda view: [plan_nodes(view, "lineitem", ["node-0", "node-1", "node-2"])])
    _right(tally)
    after = Client(live.url).tables()["lineitem"]
    assert after["nodes"] == ["node-0", "node-1", "node-2"] and after["version"] == before["version"] + 1
    assert after["stamp"] == before["stamp"] and after["rows"] == before["rows"]
    assert live.expected() == expected
    node = Client(_url(live, "node-2")).get("/v1/node")
    assert node["work"]["tables"]["lineitem"], "node-2 scanned none of its buckets"


def test_a_node_taken_out_gives_its_buckets_back(live, expected, spark, third_node) -> None:
    tally = _moving(live, expected, spark, lambda view: [plan_nodes(view, "lineitem", ["node-0", "node-1"])])
    _right(tally)
    assert Client(live.url).tables()["lineitem"]["nodes"] == ["node-0", "node-1"]
    listed = Client(_url(live, "node-2")).get("/v1/tables")["tables"]
    assert "lineitem" not in {t["name"] for t in listed}
    assert live.expected() == expected


def test_rebalance_moves_buckets_of_the_measured_load_to_the_idlest_node(live, expected, spark, third_node) -> None:
    """node-2 holds nothing: under load it is the idlest, and the first bucket moves to it from the
    node whose scans took the most time."""
    view = RegionView.of(Client(live.url))
    done = threading.Event()
    load = threading.Thread(target=faults.clients, args=(live.url, expected, ("count", "q1"), done.is_set, 3))
    load.start()
    try:
        table_costs = measure_costs(view, 2.0)
    finally:
        done.set()
        load.join()
    planned, moves = plan_rebalance(view, table_costs, threshold=0.0, tables=["lineitem", "orders"])
    spent = {node: sum(buckets.values()) for node, buckets in table_costs.items()}
    assert moves and moves[0].target == "node-2" and moves[0].source == max(spent, key=spent.get)
    tally = _moving(live, expected, spark, lambda view: planned)
    _right(tally)
    assert "node-2" in Client(live.url).tables()[moves[0].table]["nodes"]
    assert live.expected() == expected


def _url(live: FaultRegion, node: str) -> str:
    members = Client(live.url).cluster()["members"]
    return next(n["url"] for m in members for n in m["nodes"] if n["name"] == node)


def test_a_table_is_replicated_and_hash_placed_again_while_clients_query(live, expected, spark) -> None:
    """orders, hash-placed, becomes replicated (every node holds it whole: a query over it is one
    node's) and then hash-placed again, each a new version served whole, every answer right."""
    nodes = sorted(RegionView.of(Client(live.url)).nodes)
    _right(_moving(live, expected, spark, lambda view: [plan_placement(view, "orders", "replicated", 8)]))
    orders = Client(live.url).tables()["orders"]
    assert orders["placement"] == "replicated" and set(orders["nodes"]) <= set(nodes)
    for name in nodes:  # each node of the region holds it whole (the catalog lists those that answered it)
        listed = {t["name"]: t for t in Client(_url(live, name)).get("/v1/tables")["tables"]}
        assert listed["orders"]["rows"] == orders["rows"], f"{name} holds orders whole"
    _right(_moving(live, expected, spark, lambda view: [plan_placement(view, "orders", "hash(o_orderkey)", 8)]))
    orders = Client(live.url).tables()["orders"]
    assert orders["placement"] == "hash(o_orderkey) x8" and set(orders["nodes"]) <= set(nodes)
    assert live.expected() == expected


# ---- live: a standing query while its table's buckets move ------------------------------------------

STANDING = "SELECT device % 3 AS g, count(*) AS n, sum(amount) AS total, max(seq) AS last FROM moving GROUP BY 1"


def _moving_rows(first: int, count: int) -> pa.Table:
    seq = list(range(first, first + count))
    return pa.table(
        {
            "seq": pa.array(seq, pa.int64()),
            "device": pa.array([s * 7 % 23 for s in seq], pa.int64()),
            "amount": pa.array([s % 11 for s in seq], pa.int64()),
        }
    )


def test_a_standing_query_loses_no_row_and_counts_none_twice_while_its_buckets_move(live, spark) -> None:
    """`moving` re-owned by node-0 alone, then spread over node-0 and node-1 again (Spark moving
    the buckets), while rows are appended before, during and after each move: an append that
    meets a move is refused whole (409 `table_moving`, or 409/503 while the gateway learns the new
    placement) and the move runs on the version the appends were held at. After each move the
    subscription's result equals DuckDB's over every row committed, its state kept through the
    move (the rows' identity is the same), not computed again."""
    import duckdb  # the reference: loaded only where it is compared

    first = _moving_rows(0, 200)
    load_table(
        live.stores, TableSchema.from_arrow("moving", first.schema, placement=Placement.parse("hash(device)", 8)), first
    )
    eventually(lambda: "moving" in Client(live.url).tables(), 10, "moving is served")
    subscription = Client(live.url).subscribe(STANDING)
    committed = [first]
    seq = [200]

    def append() -> bool:
        """Five rows appended: True when committed."""
        rows = _moving_rows(seq[0], 5)
        seq[0] += 5
        try:
            Client(live.url).append("moving", rows)
        except GatewayError as e:  # the move holds appends, or the gateway is learning its placement
            assert e.status in (409, 503), e
            return False
        committed.append(rows)
        return True

    def answer() -> list:
        con = duckdb.connect()
        con.register("moving", pa.concat_tables(committed))
        return sorted(con.sql(STANDING).fetchall())

    for nodes in (["node-0"], ["node-0", "node-1"]):
        append()
        stop = threading.Event()
        appending = threading.Thread(target=_until, args=(stop, append))  # as fast as they go
        appending.start()
        try:  # the move holds the appends at the version they are at when it starts, and runs on it
            view = RegionView.of(Client(live.url))
            run_move(spark, plan_nodes(view, "moving", nodes), view, view, LoadOptions())
        finally:
            stop.set()
            appending.join()
        eventually(lambda on=nodes: Client(live.url).tables()["moving"]["nodes"] == on, 30, f"moving on {nodes}")
        eventually(append, 30, "an append after the move")
        doc = Client(live.url).subscription(subscription["id"])
        assert sorted(tuple(r) for r in doc["rows"]) == [tuple(r) for r in answer()], nodes
        assert doc["consolidations"] == 0  # a move keeps the rows' identity: the state stood, folded into
        once = Client(live.url).execute(STANDING).table  # and the table itself: no row lost, none twice
        assert sorted(tuple(r.values()) for r in once.to_pylist()) == answer(), nodes


def _until(stop: threading.Event, work) -> None:
    while not stop.is_set():
        work()
