"""Co-located joins planned (no node, no Spark): a query over hash-placed tables joined on their
common key is answered by every node over its own buckets, its top SELECT split into each node's
part and the coordinator's merge; what would not be exact so goes to Spark, and the plan says why."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pytest

from gateway import RegionCatalog
from gateway.sql.execute import merged
from gateway.sql.planner import Planner
from storage import NodeEngineError, NodeError, Placement
from tests.planning import CATALOG, NODES, checked

pytestmark = pytest.mark.check  # the fast lane (`make check`): no Spark, no server

JOINED = "from orders o join lineitem l on o.o_orderkey = l.l_orderkey"


def _plan(sql: str, catalog: RegionCatalog = CATALOG):
    return Planner(catalog).plan(checked(sql))


@pytest.mark.parametrize(
    "sql, how, merged",
    [
        (  # TPC-H Q3's shape: grouped by the key, so each group is whole on one node: each node's top 10
            f"select l.l_orderkey, sum(l.l_extendedprice) as revenue, o.o_orderdate {JOINED} "
            "group by l.l_orderkey, o.o_orderdate order by revenue desc, o.o_orderdate limit 10",
            "each row whole on one node, ordered again, each node's top 10 rows",
            "SELECT __o0, __o1, __o2 FROM partials ORDER BY __o1 DESC NULLS LAST, __o2 LIMIT 10",
        ),
        (  # groups split between nodes: partial aggregates, AVG as a sum over a count
            f"select o.o_orderdate, count(*) as n, avg(l.l_quantity) as q, min(l.l_shipdate) {JOINED} "
            "group by o.o_orderdate having count(*) > 2",
            "partial aggregates on each node by the group keys, reduced and finished at the coordinator",
            "SELECT __g0 AS __o0, SUM(__p0) AS __o1, CAST(SUM(__p1) AS DOUBLE PRECISION) / NULLIF(SUM(__p2), 0) "
            "AS __o2, MIN(__p3) AS __o3 FROM partials GROUP BY __g0 HAVING SUM(__p0) > 2",
        ),
        (  # grouped by a key that an outer join may make NULL on every node: the groups are merged
            "select o.o_orderkey, count(*) from lineitem l full join orders o on l.l_orderkey = o.o_orderkey "
            "group by 1",
            "partial aggregates on each node by the group keys, reduced and finished at the coordinator",
            "SELECT __g0 AS __o0, SUM(__p0) AS __o1 FROM partials GROUP BY __g0",
        ),
        (  # one group of all rows
            f"select sum(l.l_extendedprice * (1 - l.l_discount)) {JOINED} where o.o_orderdate < '1995-01-01'",
            "partial aggregates on each node, reduced and finished at the coordinator",
            "SELECT SUM(__p0) AS __o0 FROM partials",
        ),
        (  # TPC-H Q4's shape: EXISTS correlated on the key
            "select o.o_orderdate, count(*) from orders o where exists (select 1 from lineitem l "
            "where l.l_orderkey = o.o_orderkey and l.l_quantity > 10) group by 1 order by 1",
            "partial aggregates on each node by the group keys, reduced and finished at the coordinator",
            "SELECT __g0 AS __o0, SUM(__p0) AS __o1 FROM partials GROUP BY __g0 ORDER BY __o0",
        ),
        (  # TPC-H Q21's shape: NOT EXISTS too, and a replicated table
            "select n.n_name, count(*) from lineitem l1 join orders o on o.o_orderkey = l1.l_orderkey "
            "join nation n on n.n_nationkey = o.o_custkey where not exists (select 1 from lineitem l3 "
            "where l3.l_orderkey = l1.l_orderkey and l3.l_quantity > l1.l_quantity) group by 1",
            "partial aggregates on each node by the group keys, reduced and finished at the coordinator",
            "SELECT __g0 AS __o0, SUM(__p0) AS __o1 FROM partials GROUP BY __g0",
        ),
        (  # TPC-H Q18's shape: an IN subquery returning whole groups of keys
            "select o.o_orderkey, o.o_totalprice from orders o where o.o_orderkey in (select l_orderkey "
            "from lineitem group by l_orderkey having sum(l_quantity) > 300) order by 2 desc limit 5 offset 2",
            "each row whole on one node, ordered again, each node's top 7 rows",
            "SELECT __o0, __o1 FROM partials ORDER BY __o1 DESC NULLS LAST LIMIT 5 OFFSET 2",
        ),
        (  # an outer join on the key, and one preserving the hash-placed rows against replicated ones
            "select l.l_orderkey, o.o_orderdate, n.n_name from lineitem l left join orders o "
            "on l.l_orderkey = o.o_orderkey left join nation n on n.n_nationkey = o.o_custkey",
            "the nodes' rows as they come (each row whole on one node)",
            None,
        ),
        (  # a derived table keeping whole groups of keys, joined on its key; a window partitioned by the key
            "select o.o_orderkey, t.q, rank() over (partition by o.o_orderkey order by t.q) from orders o "
            "join (select l_orderkey, sum(l_quantity) as q from lineitem group by l_orderkey) t "
            "on t.l_orderkey = o.o_orderkey order by 3, 1",
            "each row whole on one node, ordered again",
            "SELECT __o0, __o1, __o2 FROM partials ORDER BY __o2, __o0",
        ),
        (  # DISTINCT without the key: on each node, then again; a sort key the output lacks is kept hidden
            f"select distinct o.o_orderdate {JOINED}",
            "distinct on each node, then of the nodes' rows",
            "SELECT DISTINCT __o0 FROM partials",
        ),
        (
            f"select o.o_orderdate {JOINED} order by l.l_quantity desc limit 3",
            "each row whole on one node, ordered again, each node's top 3 rows",
            "SELECT __o0 FROM partials ORDER BY __s0 DESC NULLS LAST LIMIT 3",
        ),
        (  # replicated rows preserved against hash-placed ones, aggregated over the NULL-extended side only
            "select n.n_name, count(o.o_orderkey), max(o.o_totalprice), min(n.n_nationkey) from nation n "
            "left join orders o on o.o_custkey = n.n_nationkey and o.o_totalprice > 5 group by 1",
            "partial aggregates on each node by the group keys, reduced and finished at the coordinator",
            "SELECT __g0 AS __o0, SUM(__p0) AS __o1, MAX(__p1) AS __o2, MIN(__p2) AS __o3 FROM partials GROUP BY __g0",
        ),
        (  # TPC-H Q13's shape: so in the one derived table the top SELECT reads, which runs on the merge
            "select c_count, count(*) as custdist from (select n_nationkey, count(o_orderkey) from orders "
            "right join nation on n_nationkey = o_custkey group by n_nationkey) as c_orders (c_custkey, c_count) "
            "group by c_count order by custdist desc, c_count desc",
            "partial aggregates on each node by the group keys, reduced and finished at the coordinator; "
            "the outer SELECT over the merged rows",
            "SELECT c_orders.c_count AS c_count, COUNT(*) AS custdist FROM ( SELECT __o0 AS c_custkey, "
            "__o1 AS c_count FROM ( SELECT __g0 AS __o0, SUM(__p0) AS __o1 FROM partials GROUP BY __g0 ) AS __merged ) "
            "AS c_orders GROUP BY c_orders.c_count ORDER BY custdist DESC NULLS LAST, c_count DESC NULLS LAST",
        ),
        (  # groups split between nodes in a derived table whose top SELECT cannot be split
            "select count(*) from (select l_quantity, count(*) as n from lineitem group by 1) t where n > 3",
            "partial aggregates on each node by the group keys, reduced and finished at the coordinator; "
            "the outer SELECT over the merged rows",
            "SELECT COUNT(*) AS _col_0 FROM ( SELECT __o0 AS l_quantity, __o1 AS n FROM ( SELECT __g0 AS __o0, "
            "SUM(__p0) AS __o1 FROM partials GROUP BY __g0 ) AS __merged ) AS t WHERE t.n > 3",
        ),
    ],
)
def test_a_query_joined_on_the_key_runs_on_every_node_and_merges(sql: str, how: str, merged: str | None) -> None:
    plan = _plan(sql)
    assert plan.engine == "colocated", plan.why
    assert plan.merge.how == how
    assert (" ".join(plan.merge.sql.split()) if plan.merge.sql else None) == merged
    assert plan.merge.layout.nodes == ["n0", "n1"]
    assert {scan.table for scan in plan.scans} & {"lineitem", "orders"}, "a hash-placed table read over its buckets"
    text = "\n".join(plan.explain())
    assert "co-located: " in text and f"coordinator: {how}" in text
    assert plan.query.names == checked(sql).names, "the answer's names are the query's"


@pytest.mark.parametrize(
    "sql, why",
    [
        (  # a replicated row unmatched on one node is NULL-extended there though matched on another
            "select n.n_name, o.o_orderkey from nation n left join orders o on o.o_custkey = n.n_nationkey",
            "a LEFT JOIN preserving replicated rows against hash-placed ones, not aggregated",
        ),
        (  # ... counted once on each node
            "select n.n_name, count(*) from nation n left join orders o on o.o_custkey = n.n_nationkey group by 1",
            "a LEFT JOIN preserving replicated rows against hash-placed ones: COUNT(*) counts a preserved row "
            "on every node",
        ),
        (
            "select n.n_name, sum(n.n_nationkey) from nation n left join orders o on o.o_custkey = n.n_nationkey "
            "group by 1",
            "a LEFT JOIN preserving replicated rows against hash-placed ones: SUM(n.n_nationkey) counts a "
            "preserved row on every node",
        ),
        (  # ... a NULL group on a node where it has no match
            "select o.o_orderdate, count(o.o_orderkey) from nation n left join orders o "
            "on o.o_custkey = n.n_nationkey group by 1",
            "a LEFT JOIN preserving replicated rows against hash-placed ones: o.o_orderdate read outside an "
            "aggregate's argument",
        ),
        (
            "select n.n_name, count(o.o_orderkey) from nation n left join orders o on o.o_custkey = n.n_nationkey "
            "where o.o_totalprice is null group by 1",
            "a LEFT JOIN preserving replicated rows against hash-placed ones: o.o_totalprice read outside an "
            "aggregate's argument",
        ),
        (  # not in the SELECT split: a derived table joined to another
            "select c.c, n.n_name from nation n join (select n2.n_name as m, count(o.o_orderkey) as c from nation n2 "
            "left join orders o on o.o_custkey = n2.n_nationkey group by 1) c on c.m = n.n_name",
            "a LEFT JOIN preserving replicated rows against hash-placed ones",
        ),
        (
            "select c.c_name, sum(o.o_totalprice) from customer c join orders o on c.c_custkey = o.o_custkey "
            "group by 1",
            "o is not joined on the key of the other hash-placed tables",
        ),
        (
            "select count(*) from orders o join lineitem l on o.o_custkey = l.l_orderkey",
            "l is not joined on the key of the other hash-placed tables",
        ),
        (  # TPC-H Q17's shape: correlated on another column than the key
            "select sum(l.l_extendedprice) from lineitem l join orders o on o.o_orderkey = l.l_orderkey "
            "where l.l_quantity < (select avg(l2.l_quantity) from lineitem l2 where l2.l_shipdate = l.l_shipdate)",
            "a subquery over hash-placed tables not correlated on their key",
        ),
        (  # the same name inside and out: the inner lineitem is every node's, not the outer row's
            "select count(*) from lineitem, orders where l_orderkey = o_orderkey "
            "and l_quantity > (select avg(l_quantity) from lineitem)",
            "a subquery over hash-placed tables not correlated on their key",
        ),
        (  # NOT IN sees a NULL of another node's
            "select count(*) from orders o where o.o_orderkey not in (select l_orderkey from lineitem "
            "where l_quantity > 10) and o.o_orderdate > '1995-01-01'",
            "a subquery over hash-placed tables not correlated on their key",
        ),
        (
            f"select o.o_orderdate, count(distinct l.l_quantity) {JOINED} group by 1",
            "an aggregate other than SUM, COUNT, MIN, MAX and AVG over groups split between nodes",
        ),
        (
            f"select o.o_orderdate, median(l.l_quantity) {JOINED} group by 1",
            "an aggregate other than SUM, COUNT, MIN, MAX and AVG over groups split between nodes",
        ),
        (
            f"select o.o_orderkey, rank() over (order by l.l_quantity) {JOINED}",
            "a window not partitioned by the key",
        ),
        (
            "select o.o_orderdate from orders o join (select l_orderkey from lineitem limit 10) t "
            "on t.l_orderkey = o.o_orderkey",
            "t: a LIMIT over rows split between nodes",
        ),
        (
            "select o.o_orderdate from orders o join (select l_quantity, count(*) as n from lineitem group by 1) t "
            "on t.n = o.o_orderkey",
            "t: an aggregate over groups split between nodes",
        ),
        (
            "select l_orderkey from lineitem, nation where l_orderkey = n_nationkey union all "
            "select o_orderkey from orders, nation where o_orderkey = n_nationkey",
            "a set operation over hash-placed tables",
        ),
    ],
)
def test_what_would_not_be_exact_on_each_node_goes_to_spark_and_says_why(sql: str, why: str) -> None:
    plan = _plan(sql)
    assert plan.engine == "spark" and plan.merge is None
    assert plan.why.endswith(f"not co-located: {why}") or f"not co-located: {why}: (" in plan.why, plan.why


def test_tables_placed_apart_or_a_dimension_missing_on_a_node_are_not_co_located() -> None:
    tables = CATALOG.tables()
    sql = f"select o.o_orderdate, count(*) {JOINED} join nation n on n.n_nationkey = o.o_custkey group by 1"
    assert _plan(sql).engine == "colocated"
    orders = tables["orders"]
    apart = replace(orders.schema.placement, buckets=2, owners=("n0", "n1"))
    moved = {**tables, "orders": replace(orders, schema=replace(orders.schema, placement=apart))}
    plan = _plan(sql, RegionCatalog.known(NODES, moved))
    assert plan.engine == "spark"
    assert plan.why.endswith("lineitem and orders are not placed alike (buckets, nodes or key type differ)")
    swapped = replace(orders.schema.placement, owners=("n1", "n0", "n0", "n1"))  # a bucket moved: not alike
    moved = {**tables, "orders": replace(orders, schema=replace(orders.schema, placement=swapped))}
    assert _plan(sql, RegionCatalog.known(NODES, moved)).engine == "spark"
    alone = {**tables, "nation": replace(tables["nation"], nodes=["n0"])}
    plan = _plan(sql, RegionCatalog.known(NODES, alone))
    assert plan.engine == "spark" and plan.why.endswith(
        "nation is not on every node holding buckets of orders, lineitem"
    )


def test_tables_whole_on_one_node_are_not_split_and_spark_joins_when_told() -> None:
    sql = f"select o.o_orderdate, count(*) {JOINED} group by 1"
    one = {name: replace(info, nodes=["n0"]) for name, info in CATALOG.tables().items()}
    single = {
        name: replace(
            info, schema=replace(info.schema, placement=Placement("hash", info.schema.placement.keys, 4, ("n0",) * 4))
        )
        if not info.replicated
        else info
        for name, info in one.items()
    }
    assert _plan(sql, RegionCatalog.known({"n0": NODES["n0"]}, single)).engine == "node"
    assert Planner(CATALOG, joins="spark").plan(checked(sql)).engine == "spark"


def test_a_merge_the_coordinators_engine_cannot_run_fails_as_a_nodes_engine_does() -> None:
    """The engine then runs the query on Spark, as for a node's part (`Engine.execute`)."""
    rows = pa.table({"__g0": [1, 2], "__p0": [3, 4]})
    assert merged(rows, "SELECT __g0, SUM(__p0) FROM partials GROUP BY __g0 ORDER BY 1").to_pylist() == [
        {"__g0": 1, "sum(partials.__p0)": 3},
        {"__g0": 2, "sum(partials.__p0)": 4},
    ]
    with pytest.raises(NodeError, match=r"the coordinator's merge: .*no_such_function") as failed:
        merged(rows, "SELECT no_such_function(__p0) FROM partials")
    assert failed.value.code == NodeEngineError.code
