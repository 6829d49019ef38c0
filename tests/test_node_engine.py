"""A node answering whole queries (PerformSys): where the plan sends a join, what the node's
engine shows and bounds, and what it does with what it cannot run."""

from __future__ import annotations

import json
import threading
import urllib.request
from contextlib import closing
from dataclasses import replace

import pytest

from benchmarks.compare import rows, rows_match
from gateway import trino_protocol
from gateway.client import Client
from gateway.sql.catalog import Snapshot
from gateway.sql.check import read_tables
from gateway.sql.engine import Engine
from gpu_kernels import get_backend
from storage import Named, NodeClient, NodeError, QueryRequest, ScanCancelled, ScanRequest, TableCache
from storage.errors import OutOfMemoryError
from storage.node_query import NodeQuery
from tests.waiting import eventually

JOIN_REPLICATED = """
    SELECT n_name, count(*) AS suppliers FROM supplier JOIN nation ON s_nationkey = n_nationkey
    JOIN region ON n_regionkey = r_regionkey WHERE r_name = 'EUROPE' GROUP BY n_name ORDER BY n_name"""
JOIN_SPLIT = "SELECT o_orderpriority, count(*) AS n FROM orders JOIN customer ON o_custkey = c_custkey GROUP BY 1"


def test_a_join_of_replicated_tables_is_answered_by_one_node(engine, duck) -> None:
    plan = engine.plan(JOIN_REPLICATED)
    assert plan.engine == "node" and "whole on node-0 and on node-1" in plan.why
    result = engine.execute(JOIN_REPLICATED)
    assert result.engine == "node"
    assert rows_match(rows(result.table), duck.sql(JOIN_REPLICATED).fetchall(), ordered=True)


def test_a_join_of_tables_split_over_nodes_goes_to_spark_and_says_why(engine) -> None:
    """customer and orders are hash-placed alike, but each on its own key: joined on another column,
    no node holds all the rows one joins."""
    plan = engine.plan(JOIN_SPLIT)
    assert plan.engine == "spark"
    why = "customer, orders are split over several nodes: Spark joins, not co-located: "
    assert plan.why == why + "customer is not joined on the key of the other hash-placed tables"
    assert why in "\n".join(plan.explain())


def test_sql_joins_spark_sends_every_join_to_spark(region, spark, spark_settings, duck) -> None:
    engine = Engine(region, spark_settings, lambda: spark, joins="spark")
    result = engine.execute(JOIN_REPLICATED)
    assert result.engine == "spark" and result.plan.why == "sql.joins = spark: every join runs on Spark"
    assert rows_match(rows(result.table), duck.sql(JOIN_REPLICATED).fetchall(), ordered=True)
    with pytest.raises(ValueError, match="joins run on node or spark, not 'duckdb'"):
        Engine(region, spark_settings, joins="duckdb")


def test_explain_analyze_shows_the_nodes_scans_and_datafusions_operators(engine) -> None:
    lines = engine.execute("EXPLAIN ANALYZE " + JOIN_REPLICATED).table.column("plan").to_pylist()
    text = "\n".join(lines)
    assert "DataFusion SQL over the sub-queries, on the node:" in text
    assert "row(s)" in text and "executed in" in text
    assert next(line for line in lines if line.startswith("executed in")).endswith(" 5 row(s)")
    assert "scan supplier -> __cxg_" in text and "scan nation -> __cxg_" in text
    assert any("HashJoinExec" in line and "output_rows=" in line for line in lines)


SAME_ROWS_TWICE = """
    SELECT count(*) AS n FROM lineitem l1, part
    WHERE p_partkey = l1.l_partkey AND p_container = 'MED BOX'
      AND l1.l_quantity < (SELECT 2 * avg(l2.l_quantity) FROM lineitem l2 WHERE l2.l_partkey = p_partkey)"""


def test_a_node_scans_filtered_views_first_sends_their_keys_and_reads_the_same_rows_once(node_engine, duck) -> None:
    """part (filtered) first; its keys filter lineitem; the two views of lineitem, which read the
    same rows, are one scan."""
    engine = node_engine
    lines = engine.execute("EXPLAIN ANALYZE " + SAME_ROWS_TWICE).table.column("plan").to_pylist()
    scans = [line.strip() for line in lines if line.strip().startswith("scan ")]
    assert len(scans) == 2 and scans[0].startswith("scan part ") and scans[1].startswith("scan lineitem "), scans
    assert scans[1].count("__cxg_") == 2, scans  # both views of lineitem from one scan
    assert any("semi-join filter: l_partkey IN (" in line for line in lines), lines
    assert rows_match(rows(engine.execute(SAME_ROWS_TWICE).table), duck.sql(SAME_ROWS_TWICE).fetchall(), ordered=False)


def test_a_correlated_not_in_runs_on_spark_and_says_why(node_engine, duck) -> None:
    engine = node_engine
    sql = "SELECT n_name FROM nation WHERE n_name NOT IN (SELECT r_name FROM region WHERE r_regionkey > n_regionkey)"
    plan = engine.plan(sql)
    assert plan.engine == "spark" and "a NOT IN over a correlated subquery" in plan.why
    assert engine.plan(sql.replace("> n_regionkey", "> 2")).engine == "node"  # uncorrelated: the node's
    assert rows_match(rows(engine.execute(sql).table), duck.sql(sql).fetchall(), ordered=False)


def test_what_the_nodes_engine_cannot_run_spark_answers(engine, duck) -> None:
    """A statement DataFusion refuses (here: a LATERAL subquery reading the outer row, which it
    cannot decorrelate) is run on Spark, the plan says why; a kept plan (`plan_kept`) is then no
    longer kept, and stays as it was."""
    sql = (
        "SELECT n_name, r.r_name FROM nation n CROSS JOIN LATERAL (SELECT r_name FROM region "
        "WHERE r_regionkey = n.n_regionkey ORDER BY r_name LIMIT 1) r ORDER BY 1"
    )
    result = engine.execute(sql)
    assert rows_match(rows(result.table), duck.sql(sql).fetchall(), ordered=True)
    assert result.engine == "spark" and result.plan.why.startswith("the node's engine could not run it")
    with closing(engine.catalog.snapshot()) as snapshot:
        query = engine.check(sql, catalog=snapshot, copy=False)
        kept = engine.plan_kept(query, read_tables(query.tree), snapshot, None)
        assert kept.engine == "node"
        assert engine.answer(kept, catalog=snapshot).engine == "spark" and kept.engine == "node"
        assert engine.plan_kept(query, read_tables(query.tree), snapshot, None) is not kept


def test_a_whole_query_for_one_node_is_planned_once_until_what_it_reads_changes(engine, duck) -> None:
    """The same query over the same tables (versions, nodes, rows) and cap is planned once: its
    plan is kept and shared, as running it only reads it."""
    expected = duck.sql(JOIN_REPLICATED).fetchall()
    with closing(engine.catalog.snapshot()) as snapshot:
        query = engine.check(JOIN_REPLICATED, catalog=snapshot, copy=False)
        names = read_tables(query.tree)
        plan = engine.plan_kept(query, names, snapshot, None)
        text = plan.node_sql
        assert engine.plan_kept(query, names, snapshot, None) is plan
        for _ in range(2):
            assert rows_match(rows(engine.answer(plan, catalog=snapshot).table), expected, ordered=True)
        assert (
            plan.engine == "node" and plan.node_sql == text and engine.plan_kept(query, names, snapshot, None) is plan
        )
        capped = engine.plan_kept(query, names, snapshot, 2)
        assert capped is not plan and "LIMIT 2" in capped.node_sql.query and "LIMIT" not in text.query
        tables = snapshot.tables()
        newer = {**tables, "nation": replace(tables["nation"], version=tables["nation"].version + 1)}
        assert engine.plan_kept(query, names, Snapshot(snapshot.nodes, newer, engine.catalog, []), None) is not plan
    with closing(engine.catalog.snapshot()) as snapshot:  # the next query's snapshot, the same tables
        assert (
            engine.plan_kept(engine.check(JOIN_REPLICATED, catalog=snapshot, copy=False), names, snapshot, None) is plan
        )


ONE_TABLE = (
    "SELECT l_returnflag, sum(l_quantity) AS q, count(*) AS n FROM lineitem "
    "WHERE l_shipdate <= DATE '1998-09-02' GROUP BY l_returnflag HAVING count(*) > 10 ORDER BY l_returnflag LIMIT 2"
)


@pytest.mark.parametrize("sql", [ONE_TABLE, "SELECT 1 + 2 AS three"])
def test_a_one_table_query_or_one_without_a_table_is_planned_once(engine, duck, sql) -> None:
    """A one-table query answered on the nodes (lineitem is split over both) and a query without a
    table are planned once too: running the plan only reads it, so it is kept and shared until
    a table it reads changes."""
    expected = duck.sql(sql).fetchall()
    with closing(engine.catalog.snapshot()) as snapshot:
        query = engine.check(sql, catalog=snapshot, copy=False)
        names = read_tables(query.tree)
        plan = engine.plan_kept(query, names, snapshot, None)
        assert plan.engine == ("nodes" if names else "coordinator")
        for _ in range(2):
            assert rows_match(rows(engine.answer(plan, catalog=snapshot).table), expected, ordered=True)
        assert engine.plan_kept(query, names, snapshot, None) is plan
        if names:  # the table as served otherwise: a newer version, or the same number after a reload
            tables = snapshot.tables()
            info = tables["lineitem"]
            keyed = replace(info.schema.placement, keys=("l_partkey",))
            for other in (
                replace(info, version=info.version + 1),
                replace(info, load="another load"),
                replace(info, schema=replace(info.schema, placement=keyed)),
            ):
                served = Snapshot(snapshot.nodes, {**tables, "lineitem": other}, engine.catalog, [])
                assert engine.plan_kept(query, names, served, None) is not plan


READ_TWICE = """
    WITH europe AS (SELECT n_nationkey, n_name FROM nation JOIN region ON n_regionkey = r_regionkey
                    WHERE r_name = 'EUROPE'),
         suppliers AS (SELECT s_nationkey, count(*) AS n FROM supplier GROUP BY s_nationkey),
         ranked AS (SELECT n_name, n, rank() OVER (ORDER BY n DESC, n_name) AS r
                    FROM europe JOIN suppliers ON s_nationkey = n_nationkey)
    SELECT a.n_name, a.n, b.n_name AS next_name FROM ranked a LEFT JOIN ranked b ON b.r = a.r + 1
    WHERE a.n > (SELECT min(n) FROM ranked) ORDER BY a.r"""


def test_a_common_table_expression_read_twice_is_computed_once_on_the_node(engine, duck) -> None:
    """DataFusion computes a common table expression wherever it is read: one read twice or more is
    computed once, first, over those it reads (written into its own statement), and kept by name."""
    plan = engine.plan(READ_TWICE)
    assert plan.engine == "node"
    written = plan.node_sql
    assert [name for name, _ in written.kept] == ["ranked"]
    assert written.kept[0][1].startswith("WITH europe AS") and "suppliers AS" in written.kept[0][1]
    assert "WITH" not in written.query and "ranked AS a" in written.query
    assert "ranked, computed once:" in "\n".join(plan.explain())
    assert rows_match(rows(engine.execute(READ_TWICE).table), duck.sql(READ_TWICE).fetchall(), ordered=True)
    analyzed = "\n".join(engine.execute("EXPLAIN ANALYZE " + READ_TWICE).table.column("plan").to_pylist())
    assert "HashJoinExec" in analyzed


def test_a_whole_query_past_its_memory_fails_alone_with_out_of_memory(region_stores) -> None:
    names = (Named.column("n_name"),)
    request = QueryRequest(
        "SELECT a.n_name, b.n_name AS other FROM a CROSS JOIN b ORDER BY 1, 2",
        {v: ScanRequest("nation", columns=names) for v in ("a", "b")},
    )
    cache = TableCache(region_stores[0])
    with pytest.raises(OutOfMemoryError, match="more memory than its share"):
        NodeQuery(request, cache, get_backend("numpy"), memory=1024).run()
    assert NodeQuery(request, cache, get_backend("numpy"), memory=64 * 2**20).run().num_rows == 25 * 25


def test_a_cancelled_whole_query_stops(region_stores) -> None:
    scan = ScanRequest("supplier", columns=(Named.column("s_name"),))
    query = NodeQuery(QueryRequest("SELECT * FROM v", {"v": scan}), TableCache(region_stores[0]), get_backend("numpy"))
    query.cancel.set()
    with pytest.raises(Exception, match="cancelled") as raised:
        query.run()
    assert getattr(raised.value, "code", None) == "cancelled"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"views": {"v": {"table": "nation"}}}, "sql must be a non-empty string"),
        ({"sql": "SELECT 1", "views": {}}, "views must be an object naming at least one scan"),
        ({"sql": "SELECT 1", "views": {"a b": {"table": "nation"}}}, "a view's name is an identifier, not 'a b'"),
        ({"sql": "SELECT 1", "views": {"v": {"table": "nation"}}, "analyze": 1}, "analyze must be true or false"),
        *(
            ({"sql": "SELECT 1", "views": {"v": {"table": "nation"}}, "kept": kept}, "kept must be a list of")
            for kept in ({"t": "SELECT 1"}, [["t"]], [["v", "SELECT 1"]], [["a b", "SELECT 1"]], [["t", " "]])
        ),
        (
            {"sql": "SELECT 1", "views": {"v": {"table": "nation"}}, "kept": [["t", "SELECT 1"], ["t", "SELECT 2"]]},
            "kept names each statement once",
        ),
    ],
)
def test_a_malformed_query_request_is_400_naming_the_problem(region, body, message) -> None:
    client = NodeClient(region["node-0"])
    with pytest.raises(NodeError, match=message) as raised:
        client.post("/v1/query", body)
    assert raised.value.status == 400 and raised.value.code == "invalid_query_request"


def test_cancelling_a_query_no_node_runs_says_so(region) -> None:
    request = urllib.request.Request(region["node-0"] + "/v1/query/nothing-running", method="DELETE")
    with urllib.request.urlopen(request) as response:
        assert json.loads(response.read()) == {"cancelled": False}


def test_a_whole_query_cancelled_by_its_client_stops_on_the_node(whole_node) -> None:
    """The client's cancellation reaches the node (DELETE), which stops the query at its next batch
    and frees its slot: a cross join of 900 M rows does not run to its end."""
    url = whole_node["node-0"]
    scan = {
        v: ScanRequest(t, columns=(Named.column(c),))
        for v, t, c in (("a", "lineitem", "l_orderkey"), ("b", "orders", "o_orderkey"))
    }
    request = QueryRequest("SELECT a.l_orderkey, b.o_orderkey FROM a CROSS JOIN b", scan, id="cancel-me")
    cancelled = threading.Event()
    outcome: list[BaseException] = []

    def ask() -> None:
        try:
            NodeClient(url).query(request, cancelled)
        except Exception as e:  # what the client gets
            outcome.append(e)

    asking = threading.Thread(target=ask)
    asking.start()
    eventually(lambda: NodeClient(url).get("/v1/node")["running"] == 1, 30, "the query running on the node")
    scanned = sum(NodeClient(url).get(f"/v1/tables/{t}")["rows"] for t in ("lineitem", "orders"))
    progress = eventually(  # both scans done, the engine's cross join running
        lambda: (p := NodeClient(url).get("/v1/query/cancel-me"))["stages_done"] == 2 and p, 30, "its scans done"
    )
    assert progress == {"id": "cancel-me", "stages": 3, "stages_done": 2, "rows_scanned": scanned}
    cancelled.set()
    asking.join(30)
    assert not asking.is_alive() and isinstance(outcome[0], ScanCancelled)
    eventually(lambda: NodeClient(url).get("/v1/node")["running"] == 0, 30, "the node's slot free again")
    with pytest.raises(NodeError, match="no query 'cancel-me' runs on node node-0") as gone:
        NodeClient(url).get("/v1/query/cancel-me")
    assert gone.value.status == 404 and gone.value.code == "unknown_query"


def test_a_statement_shows_its_whole_query_s_stages_on_the_node_as_they_finish(whole_gateway) -> None:
    """A whole query's stages (each view's scan, then the node's engine) in its statement's
    progress while it runs (asked of the node), all done once it is answered."""
    client = Client(whole_gateway.url)
    status, _, body = client.submit("SELECT max(l_orderkey + o_orderkey) FROM lineitem CROSS JOIN orders", wait=0)
    assert status == 202
    key = json.loads(body)["id"]

    def scans_done() -> dict | None:
        doc = client.get(f"/v1/statements/{key}")
        progress = doc["progress"]
        return progress if doc["state"] == "running" and progress.get("node_stages_done") == 2 else None

    progress = eventually(scans_done, 60, "both scans done on the node, its engine running")
    counted = [client.execute(f"SELECT count(*) FROM {t}").table.column(0)[0] for t in ("lineitem", "orders")]
    scanned = sum(n.as_py() for n in counted)
    assert progress == {
        "subqueries": 1,
        "subqueries_done": 0,
        "rows_scanned": scanned,
        "node_stages_done": 2,
        "node_stages": 3,
    }
    statement = whole_gateway.gateway.statements.get(key)
    assert trino_protocol.stats(statement)["progressPercentage"] == 66.7  # Trino's clients: 2 stages of 3
    [listed] = [s for s in client.statements(state="running")["statements"] if s["id"] == key]
    assert listed["progress"]["node_stages_done"] == 2 and listed["nodes"] == ["node-0"]
    assert client.cancel(key)["state"] == "cancelled"
    answered = client.execute("SELECT count(*) AS n FROM region CROSS JOIN nation")
    assert answered.table.column(0).to_pylist() == [125]
    [done] = [s for s in client.statements(limit=5)["statements"] if s["id"] == answered.id]
    assert done["progress"]["node_stages_done"] == done["progress"]["node_stages"] == 3
